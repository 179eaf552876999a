"""Do the operator samples of long tensor-core kernels already carry part of the power cap?

The harness (calibration/harness.py) times an operator as 10 untimed runs queued back to back, then
10 timed runs: a kernel of t ms is timed between about 10t and 20t ms into continuous load. The
power cap sets in within tens of milliseconds of such load (validation/throttle_onset_h200_machineAM:
the 8192-cube GEMM ran ×1.08 slower over its first 50 ms batch). Per kernel, on one GPU:

* ``clean``: one run after 2 s idle, five times (the burst the GPU gives a cold start);
* ``harness``: 2 s idle, then the harness's protocol, 10 queued and 10 timed, the mean of the middle
  five (calibration.harness.robust_mean);
* ``onset``: 2 s idle, then back-to-back runs for ``--onset-s`` seconds, each timed with CUDA events
  (its end since the load began and its duration).

Kernels: GEMMs of the training shapes (tokens x hidden -> out) and a causal flash attention.

    PYTHONPATH=. python validation/probe_sample_onset.py --out out/sample_onset.jsonl
    python validation/probe_sample_onset.py --analyse validation/sample_onset_h200_machineDD/sample_onset.jsonl

``--analyse`` prints, per kernel, its fastest run (the burst), the harness's figure over it, the mean run
over the fastest in windows of the load, and the ramp ``clip((t - start) / (end - start), 0, 1)`` closest
(least squares, 2.5 ms grid) to the GEMMs of at least 1 ms (a shorter one's first tens of ms show the
clocks still rising from idle), each run as its excess over its fastest, over its median excess 100-300 ms in.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from trainsim.calibration.harness import robust_mean

#: name -> (M, K, N) of a bf16 GEMM, or ("attn", batch, seq, heads, head_dim)
KERNELS: dict[str, tuple[Any, ...]] = {
    "gemm_8192": (8192, 8192, 8192),
    "c09_qkv": (8192, 6144, 18432),  # validation/configs.csv c09: 8192 tokens, hidden 6144
    "c09_mlp_up": (8192, 6144, 24576),
    "b03_qkv": (8192, 9600, 28800),  # validation/configs_broad_hf2.csv b03: 8192 tokens, hidden 9600
    "b03_mlp_up": (8192, 9600, 38400),
    "small_qkv": (4096, 2048, 6144),  # a paper-box layer: 4096 tokens, hidden 2048
    "b09_attn": ("attn", 2, 16384, 44, 64),  # b09: causal flash attention, sequence 16,384
}


def make(torch: Any, spec: tuple[Any, ...], dev: Any) -> tuple[Callable[[], Any], float]:
    if spec[0] == "attn":
        _, b, s, h, hd = spec
        q, k, v = (torch.randn(b, h, s, hd, device=dev, dtype=torch.bfloat16) for _ in range(3))
        f = torch.nn.functional.scaled_dot_product_attention
        return (lambda: f(q, k, v, is_causal=True)), 2.0 * b * h * s * s * hd  # causal: half of 4 b h s^2 hd
    m, k, n = spec
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(k, n, device=dev, dtype=torch.float32) * 0.02).to(torch.bfloat16)
    return (lambda: torch.mm(a, w)), 2.0 * m * k * n


def queued(torch: Any, fn: Callable[[], Any], n: int) -> list[tuple[Any, Any]]:
    """``n`` runs queued back to back, each between two CUDA events, none waited for (unlike
    calibration.power_bench.timed, which synchronises after each run and so leaves the GPU gaps)."""
    events = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        events.append((s, e))
    return events


BINS = (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


def analyse(path: str) -> list[str]:
    """The table of ``--analyse`` (module doc)."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    lines = ["kernel      burst ms  TFLOP/s  harness/burst   mean run / burst, load windows ending at (ms): "
             + " ".join(f"{int(b * 1e3)}" for b in BINS)]
    points = []
    for r in rows:
        trace = r["onset"]
        best = min(d for _, d in trace)
        cells, lo = [], 0.0
        for hi in BINS:
            ds = [d for end, d in trace if lo <= end - d / 2 < hi]
            cells.append(f"{statistics.mean(ds) / best:.3f}" if ds else "  -  ")
            lo = hi
        lines.append(f"{r['kernel']:11s} {best * 1e3:8.3f} {r['flops'] / best / 1e12:8.0f}  "
                     f"x{r['harness_s'] / best:.3f}          {' '.join(cells)}")
        settled = [d / best for end, d in trace if 0.1 <= end <= 0.3]
        level = statistics.median(settled) if settled else 1.0
        if len(r["spec"]) == 3 and best >= 1e-3 and level > 1.001:
            points += [(end - d / 2, (d / best - 1.0) / (level - 1.0)) for end, d in trace
                       if 0.01 <= end - d / 2 <= 0.3]
    if points:
        grid = [0.0025 * i for i in range(121)]
        err, a, b = min((sum((min(1.0, max(0.0, (t - a) / (b - a))) - y) ** 2 for t, y in points), a, b)
                        for a in grid for b in grid if b > a)
        lines.append(f"the cap's onset (GEMMs of 1 ms and more): starts {a * 1e3:.1f} ms into back-to-back load, "
                     f"fully set in by {b * 1e3:.1f} ms")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--analyse", help="print the table of a finished run's JSON lines instead of measuring")
    p.add_argument("--out")
    p.add_argument("--kernels", type=lambda v: v.split(","), default=list(KERNELS))
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--onset-s", type=float, default=1.0)
    args = p.parse_args()
    if args.analyse:
        print("\n".join(analyse(args.analyse)))
        return
    if not args.out:
        p.error("--out is required to measure")
    import torch

    dev = torch.device("cuda", 0)
    with open(args.out, "a") as fh:
        def emit(row: dict[str, Any]) -> None:
            fh.write(json.dumps(row) + "\n")
            fh.flush()

        for name in args.kernels:
            fn, flops = make(torch, KERNELS[name], dev)
            fn()
            torch.cuda.synchronize()
            clean = []
            for _ in range(5):
                time.sleep(args.idle_s)
                (s, e), = queued(torch, fn, 1)
                e.synchronize()
                clean.append(s.elapsed_time(e) * 1e-3)
            time.sleep(args.idle_s)
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            ev = queued(torch, fn, 10)
            torch.cuda.synchronize()
            harness = robust_mean([s.elapsed_time(e) * 1e-3 for s, e in ev])
            time.sleep(args.idle_s)
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            t_end = time.time() + args.onset_s
            onset: list[tuple[Any, Any]] = []
            while time.time() < t_end:
                onset.extend(queued(torch, fn, 8))
                onset[-1][1].synchronize()
            trace = [(start.elapsed_time(e) * 1e-3, s.elapsed_time(e) * 1e-3) for s, e in onset]
            row = {"kernel": name, "spec": list(KERNELS[name]), "flops": flops, "clean_s": clean,
                   "clean_min_s": min(clean), "harness_s": harness, "harness_over_clean": harness / min(clean),
                   "onset": trace}
            emit(row)
            late = [d for t, d in trace if t > 0.5 * args.onset_s]
            c = min(clean)
            late_x = statistics.median(late) / c if late else float("nan")
            print(f"{name:11s} clean {c * 1e3:8.3f} ms ({flops / c / 1e12:5.0f} TFLOP/s)  harness/clean "
                  f"x{harness / c:.3f}  late/clean x{late_x:.3f}", flush=True)
            del fn
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
