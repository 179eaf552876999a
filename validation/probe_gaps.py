"""Probe: where a layout's GPU sits idle within one iteration, and what the host was doing then.

Under torchrun, for each layout of ``--layouts`` whose world is this run's, on one shape: after
warm-up, one iteration profiled on rank 0 (CPU and CUDA activities). The GPU is idle where no
kernel of any stream runs. Every idle gap longer than ``--min-gap-us`` between the iteration's
start and its last kernel is listed with its offset, the kernels before and after it, and the CUDA
runtime calls and CPU operators that overlap it (the host's reason: a synchronisation, a copy,
Python work). Rank 0 appends one JSON line per layout to ``--out`` and gzips the raw trace beside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402


def gaps(events: list[dict], t0_us: float, min_gap_us: float) -> dict:
    kernels = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e.get("name", "")))
                     for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")
    host = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e.get("name", "")), str(e.get("cat")))
            for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cpu_op", "user_annotation")]
    out, end, prev = [], t0_us, "(iteration start)"
    for a, b, name in kernels:
        if a - end > min_gap_us:
            over = Counter()
            for ha, hb, hname, cat in host:
                ov = min(hb, a) - max(ha, end)
                if ov > 0:
                    over[f"{cat}:{hname[:60]}"] += ov
            out.append({"at_ms": (end - t0_us) / 1e3, "gap_ms": (a - end) / 1e3, "after": prev[:60],
                        "before": name[:60], "host": [[k, round(v / 1e3, 3)] for k, v in over.most_common(4)]})
        if b > end:
            end, prev = b, name
    idle = sum(g["gap_ms"] for g in out)
    return {"kernels": len(kernels), "span_ms": (end - t0_us) / 1e3, "idle_ms": idle, "gaps": len(out),
            "top": sorted(out, key=lambda g: -g["gap_ms"])[:25]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--shapes", default=str(Path(__file__).with_name("hf_parallel_shapes.csv")))
    ap.add_argument("--min-gap-us", type=float, default=30.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    env = probe_common.start(torch, dist)
    (shape,) = thp.read_shapes(args.shapes, [args.shape])
    for name in args.layouts.split(","):
        built = probe_common.warm_trainer(env, name, shape, 3)
        if built is None:
            continue
        trainer = built[1]
        plain = min(env.timed_step(trainer)[0] for _ in range(4))
        env.barrier()
        env.sync()
        ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if env.rank == 0 else None
        if ctx is not None:
            ctx.__enter__()
        with torch.profiler.record_function("iteration"):
            wall, _ = env.timed_step(trainer)
        if ctx is not None:
            ctx.__exit__(None, None, None)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "trace.json"
                ctx.export_chrome_trace(str(path))
                raw = path.read_bytes()
            events = json.loads(raw).get("traceEvents", [])
            it = [e for e in events if e.get("name") == "iteration" and e.get("ph") == "X"]
            t0 = float(it[0]["ts"]) if it else min(float(e["ts"]) for e in events if "ts" in e)
            row = {"layout": name, "shape": shape.name, "min_s": plain, "profiled_s": wall,
                   **gaps(events, t0, args.min_gap_us)}
            probe_common.append_json(args.out, row)
            with gzip.open(f"{args.out}.{name}.{shape.name}.trace.json.gz", "wb") as fh:
                fh.write(raw)
            print(f"{name} {shape.name}: min {plain:.4f} s, profiled {wall:.4f} s, {row['kernels']} kernels, "
                  f"idle {row['idle_ms']:.1f} ms in {row['gaps']} gaps", flush=True)
            for g in row["top"][:12]:
                print(f"   at {g['at_ms']:8.2f} ms gap {g['gap_ms']:6.2f} ms  after {g['after'][:30]:30s} "
                      f"before {g['before'][:30]:30s} host {g['host'][:2]}", flush=True)
        del trainer
        thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
