"""Probe: each rank's peak memory of the pipelined (and tensor-parallel) HF trainer, shape by shape.

`trainsim validate --measured-multi` under-estimates the peak of the pipelined layouts by 15-30 %
and of DTensor TP by 5-15 % (the tables keep the maximum over ranks). This probe runs
validation/train_hf_parallel.py's trainer for the given layouts on shapes that vary one size at a
time (micro-batches, micro-batch, layers, hidden) and records per rank the peak of an iteration
(``max_memory_allocated`` after a reset), what stays allocated between iterations, and the stage's
layers, so that what grows with which size can be read off. Rank 0 gathers and appends one JSON
line per (layout, shape) to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    gib = 2.0**30
    for shape in thp.read_shapes(args.shapes):
        for name in args.layouts.split(","):
            built = probe_common.warm_trainer(env, name, shape, 2)
            if built is None:
                continue
            _targs, trainer = built
            if env.cuda:
                torch.cuda.synchronize()
                rest = torch.cuda.memory_allocated(env.device) / gib
                torch.cuda.reset_peak_memory_stats(env.device)
            env.timed_step(trainer)
            peak = torch.cuda.max_memory_allocated(env.device) / gib if env.cuda else 0.0
            rest = rest if env.cuda else 0.0
            mine = torch.tensor([peak, rest], dtype=torch.float64, device=env.device)
            every = [torch.zeros_like(mine) for _ in range(env.world)]
            dist.all_gather(every, mine)
            row = {"layout": name, "shape": shape.name, "hidden": shape.hidden, "layers": shape.layers,
                   "seq_len": shape.seq_len, "micro_batch": shape.micro_batch,
                   "micro_batches": shape.micro_batches, "stage_layers": trainer.stage_layers,
                   "peak_gib": [float(t[0]) for t in every], "rest_gib": [float(t[1]) for t in every]}
            probe_common.record(env, torch, args.out, row,
                                f"{name:8s} {shape.name:14s} peak {' '.join(f'{x:6.2f}' for x in row['peak_gib'])} "
                                f"rest {' '.join(f'{x:6.2f}' for x in row['rest_gib'])} GiB")
            del trainer
            thp.free_memory(env)
            env.barrier()
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
