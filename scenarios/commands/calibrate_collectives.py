"""``trainsim calibrate collectives``: NCCL collective samples on this host's GPUs.

Outside a torchrun world it launches one (``torch.distributed.run``, one process per
GPU, NVLink multicast off in every worker's environment) on itself; inside one it
measures (:mod:`calibration.collectives_bench`). The samples go to ``--out`` in the
collective table format the profiles fit, one row per timed iteration.
"""

from __future__ import annotations

import argparse
import os
import subprocess


def register(sub: argparse._SubParsersAction) -> None:
    from trainsim.calibration.collectives_bench import add_arguments

    p = sub.add_parser("calibrate-collectives", help="(also `calibrate collectives`) NCCL all-reduce, all-gather, "
                                                     "reduce-scatter and P2P samples on this host's GPUs")
    add_arguments(p)
    p.add_argument("--nproc-per-node", type=int, default=None,
                   help="processes (GPUs) to launch; default: every visible GPU")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim.calibration import collectives_bench as bench

    if "WORLD_SIZE" in os.environ:  # a torchrun worker
        return bench.run(args)
    nproc = args.nproc_per_node
    if nproc is None:
        torch = bench.import_torch()
        nproc = torch.cuda.device_count() if args.backend != "gloo" else 2
    raw = list(getattr(args, "raw_argv", []))
    if "--nproc-per-node" in raw:
        i = raw.index("--nproc-per-node")
        del raw[i:i + 2]
    raw = [a for a in raw if not a.startswith("--nproc-per-node=")]
    out_i = raw.index("--out") if "--out" in raw else -1
    if out_i >= 0:
        del raw[out_i:out_i + 2]
    cmd = bench.launch_command(nproc, args.out, raw)
    return subprocess.call(cmd)
