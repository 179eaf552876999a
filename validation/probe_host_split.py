"""Probe: how a PyTorch runtime's host (CPU) time splits between forward, backward and update,
and whether it depends on the shape.

Under torchrun, for each layout of ``--layouts`` whose world is this run's and each shape of
``--only`` (train_hf_parallel.py's layouts without pipelining), after warm-up:

1. ``min_s``: the iteration time as train_hf_parallel.py measures it (min of ``--iters``);
2. ``split``: iterations with the GPU drained before each micro-batch and before the update, so
   that the host's seconds to issue a micro-batch's forward (the loss included) and its backward,
   and the update's, are what the wall clock shows (medians over micro-batches and ranks' rank 0);
3. ``each``: the same with the GPU also drained after each forward and backward: per phase the
   longer of host and GPU, the "step takes the longer of the two" model measured directly.

Rank 0 appends one JSON line per (layout, shape) to ``--out`` (resumable: pairs there are skipped).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402


def phases(env, trainer, targs, mode: str, iters: int) -> dict:
    """Medians of the per-micro-batch forward and backward and the per-iteration update seconds."""
    targs.phase_sync = mode
    fwd, bwd, upd, walls = [], [], [], []
    for _ in range(iters):
        targs.phase_log.clear()
        wall, _ = env.timed_step(trainer)
        walls.append(wall)
        for kind, a, b in targs.phase_log:
            if kind == "mb":
                fwd.append(a)
                bwd.append(b)
            else:
                upd.append(a)
    return {"fwd_s": statistics.median(fwd), "bwd_s": statistics.median(bwd), "update_s": statistics.median(upd),
            "iteration_s": min(walls)}


def alternate(env, shapes: dict, args, cuda: bool) -> int:
    for name in args.layouts.split(","):
        if thp.parse_layout(name).world != env.world:
            continue
        built = []
        for sname in args.only.split(","):
            made = probe_common.warm_trainer(env, name, shapes[sname], 2)
            assert made is not None
            built.append((sname, *made))
        for rnd in range(args.alternate):
            for sname, targs, trainer in built:
                base = min(env.timed_step(trainer)[0] for _ in range(2))
                targs.phase_log = []
                split = phases(env, trainer, targs, "before", 2)
                targs.phase_log = None
                if env.rank == 0:
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps({"layout": name, "shape": sname, "round": rnd, "min_s": base,
                                             "split": split}) + "\n")
                    print(f"{name:8s} {sname:11s} round {rnd} min {base:.4f} issue fwd {split['fwd_s']*1e3:6.2f} "
                          f"bwd {split['bwd_s']*1e3:6.2f} ms", flush=True)
        del built
        thp.free_memory(env)
    return probe_common.finish(env)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--shapes", required=True, help="shape CSVs, comma-separated")
    ap.add_argument("--only", required=True, help="shape names, comma-separated")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--alternate", type=int, default=0, metavar="R",
                    help="instead: per layout, build every shape's trainer, then R rounds of the split "
                         "measurement over the shapes in turn (is the difference between shapes systematic?)")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    cuda = env.cuda
    shapes = {}
    for f in args.shapes.split(","):
        for s in thp.read_shapes(f):
            shapes[s.name] = s
    done = set()
    if Path(args.out).is_file():
        for line in open(args.out):
            r = json.loads(line)
            done.add((r["layout"], r["shape"]))
    if args.alternate:
        return alternate(env, shapes, args, cuda)
    for sname in args.only.split(","):
        shape = shapes[sname]
        for name in args.layouts.split(","):
            made = None if (name, sname) in done else probe_common.warm_trainer(env, name, shape, 2)
            if made is None:
                continue
            targs, trainer = made
            base = min(env.timed_step(trainer)[0] for _ in range(args.iters))
            targs.phase_log = []
            split = phases(env, trainer, targs, "before", args.iters)
            each = phases(env, trainer, targs, "each", max(2, args.iters // 2))
            targs.phase_log = None
            probe_common.record(env, torch, args.out,
                                {"layout": name, "shape": sname, "layers": shape.layers,
                                 "micro_batches": shape.micro_batches, "min_s": base, "split": split, "each": each},
                                f"{name:10s} {sname:12s} min {base:.4f}  issue fwd {split['fwd_s']*1e3:7.2f} ms "
                                f"bwd {split['bwd_s']*1e3:7.2f} ms upd {split['update_s']*1e3:6.2f} ms | "
                                f"synced fwd {each['fwd_s']*1e3:7.2f} bwd {each['bwd_s']*1e3:7.2f} "
                                f"iter {each['iteration_s']:.4f}")
            del trainer
            thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
