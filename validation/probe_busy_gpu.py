"""Probe: does the host issue a training step more slowly while its GPU is busy?

At real shapes the host time of DTensor / FSDP2 / eager steps (probe_host_split.py) exceeds what the
same layouts take at tiny shapes, where the GPU is idle. This probe takes the tiny shapes and times
the host's forward / backward / update issue (GPU drained before each micro-batch, as
probe_host_split.py does) twice: with the GPU otherwise idle, and with a side stream (non-blocking)
kept busy by bf16 matmuls for the whole step. Only the current stream is synchronised, so the
side stream's work never adds to the measured times; if they grow, issuing costs more while the
GPU runs other work.

Rank 0 appends one JSON line per (layout, shape, mode) to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--only", required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    class StreamEnv(thp.Env):
        def sync(self) -> None:  # this stream only: the side stream's load must not be waited for
            torch.cuda.current_stream(self.device).synchronize()

    env = probe_common.start(torch, dist, StreamEnv)
    device = env.device
    side = torch.cuda.Stream(device)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    bmat = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ bmat
    torch.cuda.synchronize()
    mm_s = (time.perf_counter() - t0) / 10

    def load(seconds: float) -> None:
        with torch.cuda.stream(side):
            for _ in range(int(seconds / mm_s) + 1):
                a @ bmat

    shapes = {s.name: s for s in thp.read_shapes(args.shapes)}
    for sname in args.only.split(","):
        shape = shapes[sname]
        for name in args.layouts.split(","):
            built = probe_common.warm_trainer(env, name, shape, 2)
            if built is None:
                continue
            targs, trainer = built
            for mode in ("idle", "busy", "idle2", "busy2"):
                targs.phase_log, targs.phase_sync = [], "before"
                walls = []
                for _ in range(args.iters):
                    if mode.startswith("busy"):
                        load(1.5)
                        time.sleep(0.01)
                    walls.append(env.timed_step(trainer)[0])
                    torch.cuda.synchronize()
                fwd = [x[1] for x in targs.phase_log if x[0] == "mb"]
                bwd = [x[2] for x in targs.phase_log if x[0] == "mb"]
                upd = [x[1] for x in targs.phase_log if x[0] == "update"]
                if env.rank == 0:
                    row = {"layout": name, "shape": sname, "mode": mode, "fwd_s": statistics.median(fwd),
                           "bwd_s": statistics.median(bwd), "update_s": statistics.median(upd),
                           "iteration_s": min(walls), "matmul_s": mm_s}
                    probe_common.append_json(args.out, row)
                    print(f"{name:8s} {sname:11s} {mode:5s} fwd {row['fwd_s']*1e3:6.2f} ms "
                          f"bwd {row['bwd_s']*1e3:6.2f} ms "
                          f"upd {row['update_s']*1e3:5.2f} ms iter {row['iteration_s']:.4f}", flush=True)
            targs.phase_log = None
            del trainer
            thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
