"""Concurrent collectives on a 2x2 layout: tensor-parallel pairs and data-parallel pairs at once.

On 4 GPUs, as a pp1 tp2 dp2 job runs them: TP pairs {0,1}, {2,3} and DP pairs {0,2}, {1,3}; each
GPU sits in one of each, so while both run, its NVLink port carries both. Per collective
(all-reduce, all-gather), message size and mode, ``--iters`` timed calls after ``--warmup``:

* ``tp``: the two TP pairs at once (each GPU in one collective), the 1x2 calibration's setting;
* ``dp``: the two DP pairs at once;
* ``both``: every GPU launches its TP and its DP collective together, on two streams.

A call's time is the CUDA-event time on its stream, the maximum over the ranks; the row keeps the
median over calls. Rank 0 appends one JSON line per (collective, size, mode) to ``--out`` and
prints a table of the ``both`` / alone ratios. ``sim/network.py`` shares a GPU's NVLink port
between the flows on it (max-min); docs/multi_gpu.md compares the two.
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

MIB = 2**20


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", default="8,64,512")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    if env.world != 4:
        raise SystemExit("concurrent_collectives: needs 4 processes")
    rank, device = env.rank, env.device
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    streams = {"tp": torch.cuda.Stream(device), "dp": torch.cuda.Stream(device)}
    groups = {"tp": tp, "dp": dp}
    for coll in ("all_reduce", "all_gather"):
        for mib in (int(x) for x in args.sizes_mib.split(",")):
            n = mib * MIB // 2  # bf16 elements: the all-reduce's buffer, the all-gather's shard
            bufs = {k: torch.randn(n, device=device, dtype=torch.bfloat16) for k in ("tp", "dp")}
            outs = {k: torch.empty(2 * n, device=device, dtype=torch.bfloat16) for k in ("tp", "dp")}
            for mode in ("tp", "dp", "both"):
                kinds = ("tp", "dp") if mode == "both" else (mode,)
                times: dict[str, list[float]] = {k: [] for k in kinds}
                for it in range(args.warmup + args.iters):
                    dist.barrier(device_ids=[device.index])
                    torch.cuda.synchronize(device)
                    ev = {}
                    for k in kinds:
                        with torch.cuda.stream(streams[k]):
                            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            a.record()
                            if coll == "all_reduce":
                                dist.all_reduce(bufs[k], group=groups[k])
                            else:
                                dist.all_gather_into_tensor(outs[k], bufs[k], group=groups[k])
                            b.record()
                            ev[k] = (a, b)
                    torch.cuda.synchronize(device)
                    if it >= args.warmup:
                        for k in kinds:
                            t = torch.tensor([ev[k][0].elapsed_time(ev[k][1]) / 1e3], device=device)
                            dist.all_reduce(t, op=dist.ReduceOp.MAX)
                            times[k].append(float(t.item()))
                if rank == 0:
                    row = {"collective": coll, "bytes": mib * MIB, "mode": mode,
                           **{f"{k}_s": statistics.median(v) for k, v in times.items()},
                           "device": torch.cuda.get_device_name(device)}
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
            del bufs, outs
            torch.cuda.empty_cache()
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
