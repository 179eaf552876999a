"""Why training throttles less than the power probe's GEMM:copy mixes at a high tensor-core share.

On one H200 (machine DB, validation/power_same_chip_h200_machineDB/) the probe's curve put training
shapes at D = 0.66-0.69 ×1.06-1.07 slower sustained than burst; they measured ×1.03-1.04 on the same
chip. This probe times, on one GPU, burst and then 10 s of continuous load (calibration.power_bench's
``measure_kernel``: the second half's wall time per call, NVML from another thread), kernels that
differ from the probe's in one respect each:

* the operands: the 8192-cube GEMM on N(0, 1) (the probe's) or with one operand N(0, 0.02), as a
  weight at initialisation is (``gemm``, ``gemm_w02``);
* the shape: a GEMM of a training run's size, 8192 tokens x 9600 -> 28800 (b03's QKV) (``gemm_big``,
  ``gemm_big_w02``);
* the filler: the GEMM then two 256 MiB copies (the probe's ``mix_bf16_c2``), or two GELUs over as
  many bytes (``mix_gelu2``);
* the time structure: the same mix as 16 or 64 GEMMs, then 32 or 128 copies (``mix_c2_x16``,
  ``mix_c2_x64``: phases of about 20 and 90 ms instead of 1.4 ms).

    PYTHONPATH=. python validation/probe_power_mechanism.py --out out/mechanism.jsonl [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from trainsim.calibration.power_bench import measure_kernel

KINDS = ("gemm", "gemm_w02", "gemm_big", "gemm_big_w02", "mix_c2", "mix_gelu2", "mix_c2_x16", "mix_c2_x64")


def make(torch: Any, kind: str, dev: Any) -> tuple[Callable[[], Any], float]:
    """The kernel's callable and its GEMM FLOPs per call."""
    def gemm_of(m: int, k: int, n: int, weight_std: float) -> tuple[Callable[[], Any], float]:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = (torch.randn(k, n, device=dev, dtype=torch.float32) * weight_std).to(torch.bfloat16)
        return (lambda: torch.mm(a, b)), 2.0 * m * k * n

    if kind.startswith("gemm_big"):
        return gemm_of(8192, 9600, 28800, 0.02 if kind.endswith("w02") else 1.0)
    if kind.startswith("gemm"):
        return gemm_of(8192, 8192, 8192, 0.02 if kind.endswith("w02") else 1.0)
    gemm, flops = gemm_of(8192, 8192, 8192, 1.0)
    src = torch.empty(1 << 27, device=dev, dtype=torch.bfloat16).normal_()  # 256 MiB
    dst = torch.empty_like(src)
    if kind == "mix_gelu2":
        def gelu_mix() -> None:
            gemm()
            for _ in range(2):
                torch.nn.functional.gelu(src)  # reads and writes what a copy does, with the erf's arithmetic
        return gelu_mix, flops
    reps = int(kind.rsplit("_x", 1)[1]) if "_x" in kind else 1

    def mix() -> None:
        for _ in range(reps):
            gemm()
        for _ in range(2 * reps):
            dst.copy_(src)
    return mix, reps * flops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kinds", type=lambda v: v.split(","), default=list(KINDS))
    p.add_argument("--sustain-s", type=float, default=10.0)
    p.add_argument("--idle-s", type=float, default=3.0)
    args = p.parse_args()
    import torch

    dev = torch.device("cuda", 0)
    rows = []
    t = time.time()
    with open(args.out, "a") as fh:
        for rnd in range(args.rounds):
            for kind in args.kinds:
                fn, flops = make(torch, kind, dev)
                row, t = measure_kernel(torch, 0, fn, flops, t, args.idle_s, args.sustain_s)
                row = {"round": rnd, "kernel": kind, **row}
                rows.append(row)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(f"{rnd} {kind:14s} burst {row['burst_s'] * 1e3:8.3f} ms  window/burst {row['window_ratio']:.3f}"
                      f"  sm {row['sm_mhz_median']}  W {row['power_w_median']}", flush=True)
                del fn
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
