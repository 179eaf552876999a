"""Probe: where DDP's time goes beyond one GPU's (issue 12: the dp rows are under-predicted by 1-10 %).

On two GPUs of one host (``--layout dp4``: four), per shape, the same HF GPT-NeoX trainer as
validation/train_hf_parallel.py (``dp2``: DDP with 25 MB buckets, ``no_sync`` for all but the last
micro-batch) in variants, each timed in turn in one process (rounds, so a drifting machine hits
every variant alike):

* ``alone``: no DDP, each rank trains its own replica (one GPU's work, two GPUs busy at once);
* ``ddp``: as measured in the tables;
* ``nobcast``: ``broadcast_buffers=False`` (no buffer broadcast before each forward);
* ``view``: ``gradient_as_bucket_view=True`` (no copy of the gradients into the buckets and back);
* ``noop``: a comm hook that returns the bucket untouched: DDP's hooks, copies and bookkeeping
  without the all-reduce;
* ``every``: no ``no_sync``: every micro-batch's backward all-reduces.

Per variant: the minimum and median of ``--iters`` timed iterations per round, and one iteration
with the GPU drained after every phase (the host's issue and the GPU's work of each micro-batch's
forward and backward, serially). Rank 0 appends one JSON line per (shape, variant, round) to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402

VARIANTS = ("alone", "ddp", "nobcast", "view", "noop", "every")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--only", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layout", default="dp2", help="the data-parallel layout (dpN, N = the world size)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)

    def noop_hook(_state, bucket):
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    def build(name: str, shape):
        targs = thp.build_parser().parse_args(["--layouts", args.layout, "--out", "/dev/null"])
        targs.dtype = "bf16" if env.cuda else "fp32"
        targs.ddp_off = name == "alone"
        targs.ddp_kwargs = {"nobcast": {"broadcast_buffers": False},
                            "view": {"gradient_as_bucket_view": True}}.get(name, {})
        targs.ddp_comm_hook = noop_hook if name == "noop" else None
        targs.ddp_sync_every = name == "every"
        trainer = thp.build_trainer(env, thp.parse_layout(args.layout), shape, targs)
        for _ in range(3):
            trainer.step()
        return targs, trainer

    shapes = {s.name: s for s in thp.read_shapes(args.shapes)}
    for sname in args.only.split(","):
        shape = shapes[sname]
        for rnd in range(args.rounds):
            for name in args.variants.split(","):
                targs, trainer = build(name, shape)
                walls = [env.timed_step(trainer)[0] for _ in range(args.iters)]
                targs.phase_log, targs.phase_sync = [], "each"
                env.timed_step(trainer)
                phases = targs.phase_log
                targs.phase_log = None
                row = {"shape": sname, "layout": args.layout, "variant": name, "round": rnd, "min_s": min(walls),
                       "median_s": statistics.median(walls),
                       "fwd_s": [p[1] for p in phases if p[0] == "mb"],
                       "bwd_s": [p[2] for p in phases if p[0] == "mb"],
                       "update_s": [p[1] for p in phases if p[0] == "update"]}
                probe_common.record(env, torch, args.out, row,
                                    f"{sname:9s} r{rnd} {name:8s} min {row['min_s']:.4f} med {row['median_s']:.4f} | "
                                    f"fwd {' '.join(f'{x * 1e3:5.1f}' for x in row['fwd_s'])} | "
                                    f"bwd {' '.join(f'{x * 1e3:5.1f}' for x in row['bwd_s'])} | "
                                    f"upd {row['update_s'][0] * 1e3:5.1f} ms")
                del trainer
                thp.free_memory(env)
                env.barrier()
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
