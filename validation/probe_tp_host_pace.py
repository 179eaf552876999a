"""Probe: each rank's host pace, layer by layer, in DTensor tensor parallelism, without a profiler.

``validation/timeline_skew.py`` showed, on a profiled iteration, the ranks of tp2 issuing the same
forward at different paces and each all-reduce waiting for the slower host. The profiler slows the
hosts, though. This probe runs the trainer of ``validation/train_hf_parallel.py`` (``--layout``,
default tp2) unprofiled, with a forward pre-hook on the model and on each GPT-NeoX layer and a
forward hook on the model, each appending ``time.perf_counter_ns()`` (the host's monotonic clock,
shared by the ranks of one host) to a list: when the host starts issuing the micro-batch's
forward, each layer's, and when it is done with the forward. Per shape, after ``--warmup``
iterations, ``--iters`` timed iterations; each rank appends one JSON line per iteration to
``--out`` with its marks ``[kind, micro_batch, layer, t_ns]`` (kind ``F`` forward start, ``L``
layer start, ``E`` forward end) and the iteration's seconds.

    torchrun --nproc-per-node 2 validation/probe_tp_host_pace.py --shapes validation/hf_parallel_shapes_gpu_bound.csv \\
        --out pace.jsonl
    python validation/probe_tp_host_pace.py --summarize pace.jsonl   # per shape: walls, each rank's layer pace
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402

from trainsim.calibration import rank_spread  # noqa: E402


def install_marks(model, marks: list, state: dict) -> None:
    """Hooks that append (kind, micro-batch, layer, ns) to ``marks``; ``state["mb"]`` counts forwards."""

    def start(_mod, _args):
        state["mb"] += 1
        marks.append(("F", state["mb"], -1, time.perf_counter_ns()))

    def end(_mod, _args, _out):
        marks.append(("E", state["mb"], -1, time.perf_counter_ns()))

    def layer(i):
        def hook(_mod, _args):
            marks.append(("L", state["mb"], i, time.perf_counter_ns()))
        return hook

    model.register_forward_pre_hook(start)
    model.register_forward_hook(end)
    for i, mod in enumerate(model.gpt_neox.layers):
        mod.register_forward_pre_hook(layer(i))


def layer_times(marks: list) -> list[float]:
    """Seconds between consecutive layer starts within each micro-batch's forward (the host's
    issue time of a layer, the last layer of each micro-batch aside)."""
    starts: dict[int, dict[int, int]] = defaultdict(dict)
    for kind, mb, layer, t in marks:
        if kind == "L":
            starts[mb][layer] = t
    out = []
    for by_layer in starts.values():
        ts = [by_layer[i] for i in sorted(by_layer)]
        out += [(b - a) * 1e-9 for a, b in zip(ts, ts[1:], strict=False)]
    return out


def summarize(path: str) -> list[dict]:
    """Per (layout, shape): the iterations' seconds (slowest rank), each rank's median layer time, and
    the micro-batches' forward host time (``calibration/rank_spread.py``): ``mb_cv``, its spread within a
    rank (``robust_cv``, the median over ranks), and ``rank_spread``, the median over micro-batches of
    the slowest rank's over the ranks' mean (1 with one rank): how far the slowest of the ranks that
    meet at every layer's collectives lags their average."""
    walls: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    layers: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    lines: list[dict] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            key = (str(r["layout"]), str(r["name"]))
            walls[key][int(r["iter"])] = max(walls[key].get(int(r["iter"]), 0.0), float(r["wall_s"]))
            layers[key][int(r["rank"])] += layer_times(r["marks"])
            lines.append(r)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: line {n} is not a probe line "
                             f"(layout, name, rank, iter, wall_s, marks)") from None
    try:
        mbs = rank_spread.micro_batches(lines)
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: marks are not [kind, micro_batch, layer, ns]") from None
    out = []
    for key, it_walls in walls.items():
        w = sorted(it_walls.values())
        per_rank: dict[int, list[float]] = defaultdict(list)
        for by_rank in mbs[key].values():
            for rank, sec in by_rank.items():
                per_rank[rank].append(sec)
        spreads = [rank_spread.lag(v) for v in mbs[key].values() if v]
        out.append({"layout": key[0], "name": key[1], "min_s": w[0], "median_s": statistics.median(w),
                    "layer_s": {rank: statistics.median(v) for rank, v in sorted(layers[key].items()) if v},
                    "mb_cv": (statistics.median(rank_spread.robust_cv(v) for v in per_rank.values())
                              if per_rank else float("nan")),
                    "rank_spread": statistics.median(spreads) if spreads else float("nan")})
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":  # no torch needed
        try:
            rows = summarize(sys.argv[2])
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for r in rows:
            pace = "  ".join(f"rank {k}: {v * 1e3:.2f} ms" for k, v in r["layer_s"].items())
            print(f"{r['layout']:6s} {r['name']:16s} min {r['min_s']:.4f} s  median {r['median_s']:.4f} s  "
                  f"micro-batch host CV {r['mb_cv']:.3f}  slowest rank / mean {r['rank_spread']:.3f}  "
                  f"median layer forward on the host: {pace}")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--only", default=None)
    ap.add_argument("--layout", default="tp2")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    layout = thp.parse_layout(args.layout)
    for shape in thp.read_shapes(args.shapes, args.only.split(",") if args.only else None):
        marks: list = []
        state = {"mb": -1}
        built = probe_common.warm_trainer(env, args.layout, shape, args.warmup,
                                          on_model=lambda model, marks=marks, state=state:
                                          install_marks(model, marks, state))
        if built is None:
            raise SystemExit(f"probe_tp_host_pace: {args.layout} needs {layout.world} processes, got {env.world}")
        _, trainer = built
        for it in range(args.iters):
            marks.clear()
            state["mb"] = -1
            wall, _ = env.timed_step(trainer)
            with open(args.out, "a") as fh:
                fh.write(json.dumps({"layout": layout.name, "name": shape.name, "rank": env.rank, "iter": it,
                                     "wall_s": wall, "marks": [list(m) for m in marks]}) + "\n")
        if env.rank == 0:
            print(f"{layout.name} {shape.name}: done", flush=True)
        trainer = None
        env.barrier()
        thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    if "--summarize" in sys.argv:
        sys.exit(main())
    probe_common.entry(main)
