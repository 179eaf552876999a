"""Who waits for whom at each all-reduce of a tensor-parallel step, from every rank's kernel timeline.

``validation/train_hf_parallel.py --timeline`` (``TIMELINE=1 bash validation/device/hf_parallel.sh``)
writes each rank's kernels of one profiled iteration with their launch times
(``<csv>.timeline.rank<r>.jsonl``; the device script returns them as ``timeline.tgz``). Every rank
runs the same all-reduces in the same order, and the k-th one can start only when the last rank
reaches it. For each all-reduce this script finds each rank's ready time (its GPU is free, and the
host has launched the kernel: the later of the previous kernel's end and the launch) and reports,
per (layout, shape):

* how often each rank was the last to arrive, and whether that rank's arrival was set by its host
  (the launch came after its GPU was free) or by its GPU;
* the seconds each rank's all-reduces waited for the last one (sum of last ready - own ready);
* the spread of the ready times (median and mean over the all-reduces).

    python validation/timeline_skew.py measured.csv.timeline.rank0.jsonl measured.csv.timeline.rank1.jsonl

All ranks' timelines come from one host, so their clocks agree (the profiler's ``baseTimeNanoseconds``
is printed when they differ, and nothing is compared then).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ALL_REDUCE = "allreduce"


def is_all_reduce(name: str) -> bool:
    return "nccl" in name.lower() and ALL_REDUCE in name.lower().replace("_", "")


def ready_times(kernels: Sequence[Sequence[Any]]) -> list[tuple[float, bool]]:
    """Each all-reduce's (ready time in microseconds, whether the host set it) on one rank:
    ``kernels`` as ``[launch_us, start_us, dur_us, name]`` in start order."""
    out, gpu_free = [], float("-inf")
    for launch, start, dur, name in kernels:
        if is_all_reduce(name):
            host = launch if launch is not None else float("-inf")
            out.append((max(gpu_free, host), host >= gpu_free))
        gpu_free = max(gpu_free, start + dur)
    return out


def skew(ranks: dict[int, dict]) -> dict[str, Any]:
    """The waits of one (layout, shape) from its ranks' timeline records."""
    bases = {r["base_ns"] for r in ranks.values()}
    if len(bases) > 1:
        return {"error": f"the ranks' clocks differ (baseTimeNanoseconds {sorted(bases)})"}
    ready = {rank: ready_times(rec["kernels"]) for rank, rec in ranks.items()}
    n = min(len(v) for v in ready.values())
    last_count = dict.fromkeys(ranks, 0)
    waits = dict.fromkeys(ranks, 0.0)
    host_set = gpu_set = 0
    spread = []
    for i in range(n):
        at = {rank: ready[rank][i] for rank in ranks}
        last = max(sorted(at), key=lambda r: at[r][0])
        last_count[last] += 1
        if at[last][1]:
            host_set += 1
        else:
            gpu_set += 1
        for rank in ranks:
            waits[rank] += (at[last][0] - at[rank][0]) * 1e-6
        spread.append((max(t for t, _ in at.values()) - min(t for t, _ in at.values())) * 1e-6)
    return {"all_reduces": n, "counts": {r: len(v) for r, v in ready.items()}, "last": last_count,
            "last_set_by_host": host_set, "last_set_by_gpu": gpu_set, "wait_s": waits,
            "spread_median_s": statistics.median(spread) if spread else 0.0,
            "spread_mean_s": statistics.mean(spread) if spread else 0.0}


def read_records(paths: Iterable[str]) -> dict[tuple[str, str], dict[int, dict]]:
    recs: dict[tuple[str, str], dict[int, dict]] = {}
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as e:
            raise SystemExit(f"error: {path}: cannot read ({e.strerror})") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                recs.setdefault((str(r["layout"]), str(r["name"])), {})[int(r["rank"])] = r
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise SystemExit(f"error: {path}: line {n} is not a timeline record "
                                 f"(layout, name, rank, base_ns, kernels)") from None
    return recs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timelines", nargs="+", metavar="JSONL")
    args = ap.parse_args(argv)
    try:
        recs = read_records(args.timelines)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{'layout':10s} {'shape':16s} {'ARs':>4s}  last (rank: count)   set by host/GPU  waited s per rank"
          f"         spread median/mean ms")
    for (layout, name), ranks in sorted(recs.items()):
        if len(ranks) < 2:
            continue
        s = skew(ranks)
        if "error" in s:
            print(f"{layout:10s} {name:16s} {s['error']}")
            continue
        if s["all_reduces"] == 0:
            continue
        last = " ".join(f"{r}:{c}" for r, c in sorted(s["last"].items()))
        waits = " ".join(f"{r}:{w:.3f}" for r, w in sorted(s["wait_s"].items()))
        by = f"{s['last_set_by_host']:4d}/{s['last_set_by_gpu']:<4d}"
        print(f"{layout:10s} {name:16s} {s['all_reduces']:4d}  {last:20s} {by}       {waits:24s}  "
              f"{s['spread_median_s'] * 1e3:.2f}/{s['spread_mean_s'] * 1e3:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
