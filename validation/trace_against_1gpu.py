"""A layout's kernel timeline against one GPU's at the same shape: where the extra time goes.

Reads the ``--timeline`` files of ``train_hf_parallel.py`` (``<table>.timeline.rank<r>.jsonl``, each
kernel as ``[launch_us, start_us, dur_us, name]``) and, per shape, prints

* each kernel class's summed time, the layout's against ``1gpu``'s: GEMM/attention, FSDP2's copy-out
  (``split_with_sizes_copy``) and reduce-scatter copy-in (``chunk_cat``), ``multi_tensor_apply``
  (the optimizer, and FSDP2's all-gather copy-in on its own stream), NCCL, everything else;
* the GEMM and attention kernels matched one to one (the same model issues them in the same order),
  split by what ran beside them in the layout: more than half their time beside an NCCL kernel,
  5-50 %, beside a ``multi_tensor_apply`` kernel only, or alone; each group's time in both runs.

A GEMM that runs alone in both is slowed only by what differs between the runs at that moment: the
power cap's throttle (docs/efficiency.md).

    python validation/trace_against_1gpu.py <dir>/measured.csv.timeline.rank0.jsonl --layout fsdp2
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_hf_parallel import kernel_category  # noqa: E402  (the trainer's own kernel categories)

Interval = tuple[float, float]


def merged(intervals: Sequence[Interval]) -> list[list[float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(s: float, e: float, union: list[list[float]], starts: list[float]) -> float:
    """Seconds of [s, e] inside the merged intervals ``union`` (``starts``: their starts)."""
    total = 0.0
    for k in range(max(0, bisect.bisect_right(starts, s) - 1), bisect.bisect_right(starts, e)):
        total += max(0.0, min(e, union[k][1]) - max(s, union[k][0]))
    return total


CLASSES = ("gemm/attention", "other", "copy_out", "chunk_cat", "multi_tensor_apply", "nccl")


def kernel_class(name: str) -> str:
    """The trainer's kernel category (:func:`train_hf_parallel.kernel_category`), GEMM and attention
    together and the collectives as one, with FSDP2's copies and ``multi_tensor_apply`` apart."""
    for key, cls in (("split_with_sizes", "copy_out"), ("chunk_cat", "chunk_cat"),
                     ("multi_tensor_apply", "multi_tensor_apply")):
        if key in name:
            return cls
    cat = kernel_category(name)
    return "nccl" if cat.startswith("nccl") else "gemm/attention" if cat in ("gemm", "attention") else "other"


def gemms(kernels: list[list]) -> list[tuple[str, float, str]]:
    """Each GEMM/attention kernel: name, microseconds, and what ran beside it."""
    nccl = merged([(k[1], k[1] + k[2]) for k in kernels if "nccl" in k[3]])
    side = merged([(k[1], k[1] + k[2]) for k in kernels if "multi_tensor_apply" in k[3]])
    ns, ss = [u[0] for u in nccl], [u[0] for u in side]
    out = []
    for _, s, d, name in kernels:
        if kernel_class(name) != "gemm/attention" or d <= 0:
            continue
        under = covered(s, s + d, nccl, ns) / d
        beside = covered(s, s + d, side, ss) / d
        where = ("beside NCCL >50 %" if under > 0.5 else "beside NCCL 5-50 %" if under > 0.05 else
                 "beside copy-in" if beside > 0.05 else "alone")
        out.append((name, d, where))
    return out


def split(runs: dict[tuple[str, str], dict], layout: str) -> dict[str, dict]:
    """Per shape run both ways: ``walls`` (s), ``classes`` {class: (1gpu us, layout us)} and ``gemms``
    {what ran beside: (count, 1gpu us, layout us)} over the kernels matched one to one, with
    ``matched`` of ``counts`` (1gpu, layout)."""
    out = {}
    for (lay, shape), run in runs.items():
        base = runs.get(("1gpu", shape))
        if lay != layout or base is None:
            continue
        sums = []
        for r in (base, run):
            c: collections.Counter[str] = collections.Counter()
            for k in r["kernels"]:
                c[kernel_class(k[3])] += k[2]
            sums.append(c)
        one, other = gemms(base["kernels"]), gemms(run["kernels"])
        groups: dict[str, tuple[int, float, float]] = {}
        for (n1, d1, _), (n2, d2, where) in zip(one, other, strict=False):
            if n1 == n2:
                n, t1, t2 = groups.get(where, (0, 0.0, 0.0))
                groups[where] = (n + 1, t1 + d1, t2 + d2)
        out[shape] = {"walls": (base["wall_s"], run["wall_s"]),
                      "classes": {cls: (sums[0][cls], sums[1][cls]) for cls in CLASSES},
                      "gemms": groups, "matched": sum(g[0] for g in groups.values()),
                      "counts": (len(one), len(other))}
    return out


def report(runs: dict[tuple[str, str], dict], layout: str) -> list[str]:
    lines = []
    for shape, s in split(runs, layout).items():
        w1, w2 = s["walls"]
        lines.append(f"{shape}: wall {w1 * 1e3:.1f} ms (1gpu) -> {w2 * 1e3:.1f} ms ({layout})")
        for cls, (a, b) in s["classes"].items():
            lines.append(f"  {cls:20s} {a / 1e3:8.1f} -> {b / 1e3:8.1f} ms  ({(b - a) / 1e3:+.1f})")
        lines.append(f"  GEMM/attention matched one to one: {s['matched']} of {s['counts'][0]} (1gpu) and "
                     f"{s['counts'][1]}")
        for where, (n, t1, t2) in sorted(s["gemms"].items()):
            lines.append(f"    {where:20s} n={n:4d}  {t1 / 1e3:7.1f} -> {t2 / 1e3:7.1f} ms  x{t2 / t1:.3f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline", help="a rank's <table>.timeline.rank<r>.jsonl")
    p.add_argument("--layout", required=True, help="the layout to set beside 1gpu (fsdp2, dp2, tp2, ...)")
    args = p.parse_args(argv)
    with open(args.timeline) as fh:
        runs = {(r["layout"], r["name"]): r for r in map(json.loads, fh) if r.get("kernels")}
    print("\n".join(report(runs, args.layout)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
