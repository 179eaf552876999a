"""Probe: why DTensor layouts of train_hf_parallel.py take longer than their host time or their GPU time.

Under torchrun, for each layout of ``--layouts`` on one shape, after warm-up:

1. the iteration time as train_hf_parallel.py measures it (min of ``--iters``);
2. the same with Python's cyclic garbage collector off (``gc.disable()``, collected before);
3. one iteration under ``torch.cuda.set_sync_debug_mode("warn")``: every operation that makes the
   host wait for the GPU, counted per call site (file:line of the innermost frame outside torch);
4. the caching allocator's cudaMalloc / cudaFree calls, retries and stream syncs per timed iteration
   (cudaFree and a retry synchronize the device; set_sync_debug_mode does not see them).

Rank 0 appends one JSON line per layout to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402


def timed(env, trainer, iters: int) -> float:
    return min(env.timed_step(trainer)[0] for _ in range(iters))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--shape", required=True, help="a shape name of --shapes")
    ap.add_argument("--shapes", default=str(Path(__file__).with_name("hf_parallel_shapes.csv")))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    cuda, device = env.cuda, env.device
    (shape,) = thp.read_shapes(args.shapes, [args.shape])
    for name in args.layouts.split(","):
        made = probe_common.warm_trainer(env, name, shape, 3)
        if made is None:
            continue
        trainer = made[1]
        keys = ("num_alloc_retries", "num_sync_all_streams", "num_device_alloc", "num_device_free")
        before = {k: torch.cuda.memory_stats(device).get(k, 0) for k in keys} if cuda else {}
        base = timed(env, trainer, args.iters)
        alloc = ({k: (torch.cuda.memory_stats(device).get(k, 0) - before[k]) / args.iters for k in keys}
                 if cuda else {})
        gc.collect()
        gc.disable()
        nogc = timed(env, trainer, args.iters)
        gc.enable()
        sites: collections.Counter[str] = collections.Counter()
        env.sync()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            t0 = time.perf_counter()
            trainer.step()
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
        env.sync()
        debug_s = time.perf_counter() - t0
        for w in caught:
            if "synchroniz" in str(w.message):
                sites[f"{Path(w.filename).name}:{w.lineno}"] += 1
        if env.rank == 0:
            with open(args.out, "a") as fh:
                fh.write(json.dumps({"layout": name, "shape": shape.name, "min_s": base, "min_nogc_s": nogc,
                                     "syncs": sum(sites.values()), "sites": sites.most_common(12),
                                     "debug_iteration_s": debug_s, "allocator_per_iteration": alloc}) + "\n")
            print(name, shape.name, f"{base:.4f} s, gc off {nogc:.4f} s, {sum(sites.values())} syncs:",
                  sites.most_common(6), "allocator per iteration:", alloc, flush=True)
        del trainer
        thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
