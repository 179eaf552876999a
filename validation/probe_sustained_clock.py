"""How fast a GEMM runs in the operator harness's short bursts against sustained training-like load.

The operator samples time 10 warm-up and 10 timed runs of one operator; a training run keeps the
GPU busy for minutes, where the H200 was seen at its 700 W power cap with the SM clock at a median
1,778 MHz instead of 1,980 (validation/h200_solo/clocks.csv). This probe times the same bf16
matrix products both ways on one GPU, reading the SM clock and power through NVML, and writes a
JSON line per shape: burst and sustained time, their ratio, the clocks. ``--dtype fp8`` times the
FP8 GEMM Transformer Engine runs on Hopper instead (``torch._scaled_mm``, e4m3 operands,
per-tensor scales, bf16 out), the kind the published NeMo / Megatron-Bridge runs use.

    PYTHONPATH=. python validation/probe_sustained_clock.py --out out/sustained.jsonl [--dtype fp8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from trainsim.calibration.power_bench import timed  # CUDA events around each run

SHAPES = [  # (m, k, n): a square GEMM, an MLP-up of d=4096 at 8k tokens, a QKV of d=2048 at 8k tokens
    (8192, 8192, 8192), (8192, 4096, 16384), (8192, 2048, 6144)]


def smi() -> tuple[float, float]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True).stdout.split(",")
    return float(out[0]), float(out[1])


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sustain-s", type=float, default=12.0)
    p.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    args = p.parse_args()
    dev = torch.device("cuda")
    rows = []
    for m, k, n in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        if args.dtype == "fp8":
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
            one = torch.ones((), device=dev, dtype=torch.float32)
            fn = lambda a8=a8, b8=b8, one=one: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,  # noqa: E731
                                                                 out_dtype=torch.bfloat16)
        else:
            fn = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        time.sleep(3.0)  # idle: the clock and power recover
        idle = smi()
        torch.cuda._sleep(2_000_000)  # the harness's way: the GPU is held, then 10 + 10 runs
        ts = timed(torch, fn, 20)[10:]
        burst = statistics.mean(sorted(ts)[2:7])
        after_burst = smi()
        t_end = time.time() + args.sustain_s
        clocks = []
        while time.time() < t_end:
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            clocks.append(smi())
        ts = timed(torch, fn, 20)
        sustained = statistics.mean(sorted(ts)[7:12])
        row = {"gpu": torch.cuda.get_device_name(0), "dtype": args.dtype, "m": m, "k": k, "n": n, "burst_s": burst,
               "sustained_s": sustained, "ratio": sustained / burst,
               "burst_tflops": 2 * m * k * n / burst / 1e12, "sustained_tflops": 2 * m * k * n / sustained / 1e12,
               "idle_sm_mhz": idle[0], "after_burst_sm_mhz": after_burst[0],
               "sustained_sm_mhz_median": statistics.median(c for c, _ in clocks),
               "sustained_power_w_median": statistics.median(w for _, w in clocks)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
