"""The power cap under sustained load, measured: one process per GPU, every GPU loaded at once.

Each process times a kernel in the operator harness's burst (the GPU held by a sleep kernel, 10 warm-up
and 10 timed runs, the mean of the middle five) and over the second half of ``sustain_s`` seconds of
continuous load (``window_s``: wall time per kernel, the issuing thread keeping the GPU's queue full;
NVML's SM clock, power and temperature read from another thread). Kernels:

* ``gemm_<bf16|fp8>_8192``: the 8192-cube GEMM (FP8: ``torch._scaled_mm``, e4m3, per-tensor scales);
  ``gemm_bf16_8192x2048x6144``; ``copy_1gib``, ``copy_256mib``;
* ``mix_<bf16|fp8>_c<N>``: the 8192-cube GEMM, then N copies of 256 MiB (the GEMM's share D of the
  time set by N): what :mod:`calibration.power_cap` fits; ``mix_<bf16|fp8>_e<N>`` and ``gelu_256mib``: the
  same with N GELUs over as many bytes as a copy (elementwise work with arithmetic, as a layer's is);
* ``mix_bf16_i<N>``, ``idle_i<N>``: four GEMMs (or none), then N ms of idle GPU; ``mix_gemm_copy``.

``trainsim calibrate power`` runs :data:`FIT_KERNELS` and fits the sample folder's ``power_cap.json``;
``validation/probe_gpu_spread.py`` is the device batches' entry (docs/efficiency.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainsim.calibration.power_cap import FILLERS

KERNELS = ("gemm_bf16_8192", "gemm_bf16_8192x2048x6144", "gemm_fp8_8192", "copy_1gib", "mix_gemm_copy")
#: what calibration.power_cap fits: the lone GEMMs, the copy, and GEMM:copy mixes from D ~0.5 to ~0.9
FIT_KERNELS = ("gemm_bf16_8192", "mix_bf16_c1", "mix_bf16_c2", "mix_bf16_c4", "mix_bf16_c8", "copy_256mib",
               "gemm_fp8_8192", "mix_fp8_c1", "mix_fp8_c2", "mix_fp8_c4")


#: a mix's other work by its letter (``mix_<dtype>_c<N>`` copies, ``mix_<dtype>_e<N>`` GELUs): the kernels
#: calibration.power_cap reads each mix against
MIX_FILLERS = {letter: kernel for kernel, letter in FILLERS.values()}


def smi(index: int) -> dict[str, Any]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,uuid,serial",
                          "--format=csv,noheader,nounits", "-i", str(index)], capture_output=True, text=True).stdout
    f = [x.strip() for x in out.split(",")]
    if len(f) < 5:
        return {}
    return {"sm_mhz": float(f[0]), "power_w": float(f[1]), "temp_c": float(f[2]), "uuid": f[3], "serial": f[4]}


def sample_until(index: int, t_end: float, out: list[dict[str, Any]]) -> None:
    while time.time() < t_end:
        out.append(smi(index))
        time.sleep(0.25)


def make(torch: Any, kind: str, dev: Any) -> tuple[Any, float]:
    """The kernel's callable and its work (FLOPs, or bytes moved for the copy). ``mix_<dtype>_c<N>``: the
    8192-cube GEMM of that dtype, then N copies of 256 MiB (the GEMM's share of the time set by N)."""
    if kind.startswith(("mix_bf16_i", "idle_i")):  # four GEMMs (or a one-element add), then the GPU idles N ms
        n_ms = int(kind.rsplit("_i", 1)[1])
        if kind.startswith("idle_"):
            x = torch.zeros(1, device=dev)
            work: Any = lambda: x.add_(1.0)  # noqa: E731
            flops = 0.0
        else:
            work, flops = make(torch, "gemm_bf16_8192", dev)

        def then_idle() -> None:
            for _ in range(1 if kind.startswith("idle_") else 4):
                work()
            torch.cuda.synchronize()
            time.sleep(n_ms * 1e-3)
        return then_idle, 4 * flops
    if kind == "gelu_256mib":  # elementwise work with arithmetic, as a layer's activations and norms are
        src = torch.empty(1 << 27, device=dev, dtype=torch.bfloat16).normal_()
        f = torch.nn.functional.gelu
        return (lambda: f(src)), 2.0 * src.numel() * src.element_size()
    if kind.startswith(("mix_bf16_", "mix_fp8_")):  # the GEMM, then N copies (c<N>) or GELUs (e<N>) of 256 MiB
        dtype, rest = kind[4:].split("_", 1)
        gemm, flops = make(torch, f"gemm_{dtype}_8192", dev)
        other, _ = make(torch, MIX_FILLERS[rest[0]], dev)
        n = int(rest[1:])

        def mix_n() -> None:
            gemm()
            for _ in range(n):
                other()
        return mix_n, flops
    if kind == "mix_gemm_copy":  # training-like: a power-heavy GEMM, then memory-bound work of about its length
        gemm, flops = make(torch, "gemm_bf16_8192", dev)
        copy, _ = make(torch, "copy_1gib", dev)

        def mix() -> None:
            gemm()
            copy()
            copy()
        return mix, flops
    if kind in ("copy_1gib", "copy_256mib"):
        src = torch.empty((1 << 29) if kind == "copy_1gib" else (1 << 27), device=dev, dtype=torch.bfloat16).normal_()
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2.0 * src.numel() * src.element_size()
    m, k, n = (8192, 8192, 8192) if kind.endswith("8192") else (8192, 2048, 6144)
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    if kind.startswith("gemm_fp8"):
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device=dev, dtype=torch.float32)
        return (lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), 2.0 * m * k * n
    return (lambda: torch.mm(a, b)), 2.0 * m * k * n


def worker(index: int, start: float, args: argparse.Namespace, queue: Any) -> None:
    """One GPU's process: every round and kernel of ``args`` (rounds, kernels, idle_s, sustain_s), each
    row put on ``queue`` as it is measured; None when done."""
    import torch

    torch.cuda.set_device(index)
    dev = torch.device("cuda", index)
    t = start
    for rnd in range(args.rounds):
        for kind in args.kernels:
            fn, work = make(torch, kind, dev)
            row, t = measure_kernel(torch, index, fn, work, t, args.idle_s, args.sustain_s)
            queue.put({"round": rnd, "kernel": kind, **row})
            del fn
            torch.cuda.empty_cache()
    queue.put(None)


def measure_kernel(torch: Any, index: int, fn: Callable[[], Any], work: float, t: float, idle_s: float,
                   sustain_s: float) -> tuple[dict[str, Any], float]:
    """One kernel on GPU ``index``: idle until ``t + idle_s``, its burst, ``sustain_s`` seconds of continuous
    load (NVML from another thread) and its timed runs after it. Returns the row and when the next may start."""
    fn()
    torch.cuda.synchronize()
    t += idle_s  # every GPU idles, then starts the burst at the same instant
    time.sleep(max(0.0, t - time.time()))
    torch.cuda._sleep(2_000_000)
    burst = statistics.mean(sorted(timed(torch, fn, 20)[10:])[2:7])
    t_end = t + sustain_s
    samples: list[dict[str, Any]] = []
    # NVML is read from another thread: the issuing thread keeps the GPU's queue full
    sampler = threading.Thread(target=sample_until, args=(index, t_end, samples), daemon=True)
    sampler.start()
    batch = max(1, int(0.1 / burst))  # about 100 ms of work between synchronisations
    done, mark = 0, None  # the window's throughput: its second half, from the first sync past t_mid
    t_mid = t + sustain_s / 2
    while time.time() < t_end:
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        done += batch
        if mark is None and time.time() >= t_mid:
            mark = (time.time(), done)
    window = (time.time() - mark[0]) / (done - mark[1]) if mark and done > mark[1] else float("nan")
    sampler.join()
    sustained = statistics.mean(sorted(timed(torch, fn, 20))[7:12])
    ok = [s for s in samples if s]
    row = {"gpu": index, "name": torch.cuda.get_device_name(index),
           "uuid": ok[0]["uuid"] if ok else "", "serial": ok[0]["serial"] if ok else "",
           "burst_s": burst, "sustained_s": sustained, "ratio": sustained / burst,
           "window_s": window, "window_ratio": window / burst,
           "burst_rate": work / burst, "sustained_rate": work / sustained,
           "sm_mhz_median": statistics.median(s["sm_mhz"] for s in ok) if ok else None,
           "power_w_median": statistics.median(s["power_w"] for s in ok) if ok else None,
           "temp_c_max": max(s["temp_c"] for s in ok) if ok else None, "nvml_samples": len(ok)}
    return row, t_end + 2.0  # margin for the timed runs before the next kernel


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Per round and kernel: each GPU's sustained time over the GPUs' mean, and the slowest's."""
    lines = ["round kernel                     " + " ".join(f"gpu{g}" for g in sorted({r['gpu'] for r in rows}))
             + "   spread(max/mean)  burst spread  clocks MHz   (per GPU: its time per kernel over the\n"
             "second half of the sustained load, over the GPUs' mean)"]
    for rnd in sorted({r["round"] for r in rows}):
        for kind in dict.fromkeys(r["kernel"] for r in rows):
            rs = sorted((r for r in rows if r["round"] == rnd and r["kernel"] == kind), key=lambda r: r["gpu"])
            if not rs:
                continue
            mean_s = statistics.mean(r["window_s"] for r in rs)
            mean_b = statistics.mean(r["burst_s"] for r in rs)
            rel = " ".join(f"{r['window_s'] / mean_s:.3f}" for r in rs)
            lines.append(f"{rnd:5d} {kind:26s} {rel}   {max(r['window_s'] for r in rs) / mean_s - 1:+.2%}"
                         f"           {max(r['burst_s'] for r in rs) / mean_b - 1:+.2%}"
                         f"        {' '.join(str(int(r['sm_mhz_median'] or 0)) for r in rs)}"
                         f"   window/burst {statistics.mean(r['window_ratio'] for r in rs):.3f}")
    return lines


def timed(torch: Any, fn: Callable[[], Any], n: int) -> list[float]:
    """Seconds of ``n`` runs, each between two CUDA events."""
    out = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e-3)
    return out


def add_arguments(p: argparse.ArgumentParser, kernels: Sequence[str] = KERNELS, rounds: int = 2,
                  sustain_s: float = 12.0) -> None:
    p.add_argument("--rounds", type=int, default=rounds, help=f"rounds over the kernels (default {rounds})")
    p.add_argument("--sustain-s", type=float, default=sustain_s,
                   help=f"seconds of continuous load per kernel (default {sustain_s:g})")
    p.add_argument("--idle-s", type=float, default=3.0, help="idle seconds before each kernel's burst")
    p.add_argument("--kernels", type=lambda v: v.split(","), default=list(kernels),
                   help="comma-separated: " + ", ".join(KERNELS) + ", copy_256mib, mix_<bf16|fp8>_c<N>, "
                        "gelu_256mib, mix_<bf16|fp8>_e<N>, "
                        "mix_bf16_i<N> (four GEMMs, then N ms idle), idle_i<N> (the same without the GEMMs)")


def measure(gpus: int, out: str | Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every GPU's worker at once; each row appended to ``out`` (JSON lines) as it arrives."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start = time.time() + 20.0  # every process imports torch and builds its tensors before this
    procs = [ctx.Process(target=worker, args=(i, start, args, queue)) for i in range(gpus)]
    for pr in procs:
        pr.start()
    rows: list[dict[str, Any]] = []
    done = 0
    with open(out, "a") as f:
        while done < gpus:
            r = queue.get()
            if r is None:
                done += 1
                continue
            rows.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
    for pr in procs:
        pr.join()
    return rows
