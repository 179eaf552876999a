"""Probe: in which iteration a layout's peak memory is reached, and by how much over the steady state.

``validation/train_hf_parallel.py`` resets the peak before its warm-up, so its ``max_mem_gib`` is the
largest of every iteration it ran. This probe builds the trainer of one (layout, shape) without any
step, then runs ``--steps`` iterations, resetting the peak before each and recording it after, with
the bytes allocated before and after and the number of parameters: DDP at one micro-batch measured
8 bytes per parameter over one GPU (validation/unseen7_h200_2gpu_machineBX/), where operators/memory.py
counted 4; this says whether that is the steady state or the first iterations.

    torchrun --nproc-per-node 2 validation/probe_ddp_memory.py --layout dp2 \\
        --shapes validation/hf_parallel_shapes_unseen7.csv --shape w06 --out ddp_memory.jsonl
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
    ap.add_argument("--layout", required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--before", metavar="LAYOUT:SHAPE", help="first build, run (two steps) and release this "
                    "pair in the same process, as train_hf_parallel.py runs its pairs one after another")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    gib = 2.0**30
    if args.before:
        lay, _, name = args.before.partition(":")
        # built, run and dropped at once, as run_pair releases a pair; then every rank past, collected
        probe_common.warm_trainer(env, lay, thp.read_shapes(args.shapes, [name])[0], 2)
        env.barrier()
        thp.free_memory(env)
    shape = thp.read_shapes(args.shapes, [args.shape])[0]
    built = probe_common.warm_trainer(env, args.layout, shape, 0)
    if built is None:
        return probe_common.finish(env)
    _targs, trainer = built
    n_params = sum(p.numel() for _n, p in trainer.named_params())
    iters = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(env.device) / gib
        torch.cuda.reset_peak_memory_stats(env.device)
        trainer.step()
        torch.cuda.synchronize()
        iters.append({"before_gib": before, "peak_gib": torch.cuda.max_memory_allocated(env.device) / gib,
                      "after_gib": torch.cuda.memory_allocated(env.device) / gib})
    row = {"layout": args.layout, "shape": shape.name, "rank": env.rank, "before": args.before, "params": n_params,
           "fp32_copy_gib": 4.0 * n_params / gib, "iterations": iters}
    peaks = " ".join(f"{it['peak_gib']:.2f}" for it in iters)
    rows = [None] * env.world  # every rank's row: train_hf_parallel.py reports the largest rank's peak
    dist.all_gather_object(rows, row)
    if env.rank == 0:
        for r in rows[1:]:
            probe_common.append_json(args.out, {**r, "device": probe_common.device_name(torch, env)})
            print(f"  rank {r['rank']}: peak per iteration "
                  + " ".join(f"{it['peak_gib']:.2f}" for it in r["iterations"]) + " GiB", flush=True)
    probe_common.record(env, torch, args.out, row,
                        f"{args.layout} {shape.name}: {n_params / 1e6:.0f} M parameters (4 B each "
                        f"{4.0 * n_params / gib:.2f} GiB); peak per iteration {peaks} GiB; allocated before "
                        f"the first {iters[0]['before_gib']:.2f}, after the last {iters[-1]['after_gib']:.2f}")
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
