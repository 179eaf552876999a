"""Does a smaller GEMM throttle as much as the power probe's 8192-cube one? One GPU, bf16.

Per GEMM shape (M x K x N, as ``torch.mm`` of an (M, K) and a (K, N) matrix), in turn:

1. ``burst``: after ``--idle-s`` idle seconds, the harness's protocol (calibration.harness: 10 warm-up
   runs, then 10 timed, the mean of the middle 5 of their CUDA-event times);
2. ``sustained``: back to back for ``--sustain-s`` seconds in batches of about 20 ms, each batch timed
   with CUDA events; the mean per GEMM over the last third.

JSON lines in ``--out`` (``{"shape", "burst_ms", "sustained_ms", "ratio"}``) and a table last. The
power-cap model (calibration.power_cap) prices every tensor-core kernel with the 8192-cube GEMM's
curve; a ratio well under that GEMM's says the size matters.

    PYTHONPATH=. python validation/probe_gemm_sizes_cap.py --out out/gemm_sizes.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

#: the power probe's GEMM, then train_3d.py's d2048-L8-b2 GEMMs (tokens 4096): QKV, MLP-up, MLP-down,
#: the LM head, and d6144-L2-b4's MLP-up (tokens 8192)
SHAPES = ((8192, 8192, 8192), (4096, 2048, 6144), (4096, 2048, 8192), (4096, 8192, 2048), (4096, 2048, 50304),
          (8192, 6144, 24576))


def timed_mean(torch, fn, runs: int) -> float:
    """Seconds per run of ``fn`` over ``runs`` runs, one pair of CUDA events around them."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(runs):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e-3 / runs


def one_shape(torch, m: int, k: int, n: int, idle_s: float, sustain_s: float) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)

    def fn():
        torch.mm(a, b)
    fn()
    torch.cuda.synchronize()
    time.sleep(idle_s)
    for _ in range(10):  # the harness's warm-up
        fn()
    runs = sorted(timed_mean(torch, fn, 1) for _ in range(10))
    burst = statistics.mean(runs[2:7])
    one = max(burst, 1e-6)
    batch = max(1, int(0.02 / one))
    per, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < sustain_s:
        per.append(timed_mean(torch, fn, batch))
    tail = per[-max(1, len(per) // 3):]
    sustained = statistics.mean(tail)
    return {"shape": f"{m}x{k}x{n}", "burst_ms": 1e3 * burst, "sustained_ms": 1e3 * sustained,
            "ratio": sustained / burst, "tflops_burst": 2 * m * k * n / burst / 1e12}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--idle-s", type=float, default=3.0)
    p.add_argument("--sustain-s", type=float, default=8.0)
    args = p.parse_args()
    import torch

    rows = []
    with open(args.out, "a") as fh:
        for m, k, n in SHAPES:
            r = one_shape(torch, m, k, n, args.idle_s, args.sustain_s)
            r["gpu"] = torch.cuda.get_device_name()
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            rows.append(r)
            torch.cuda.empty_cache()
            print(f"{r['shape']:18s} burst {r['burst_ms']:8.3f} ms ({r['tflops_burst']:5.0f} TFLOP/s)  sustained "
                  f"{r['sustained_ms']:8.3f} ms  x{r['ratio']:.3f}", flush=True)


if __name__ == "__main__":
    main()
