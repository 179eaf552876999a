"""Does a smaller GEMM throttle as much as the power probe's 8192-cube one? One GPU, bf16.

Per GEMM (M x K x N; ``mm``: ``torch.mm`` of an (M, K) and a (K, N) matrix; ``fwd``: ``F.linear`` of (M, K)
activations and an (N, K) weight, as a layer's forward; ``dgrad``: an (M, N) gradient times that weight;
``wgrad``: the (N, M) transposed gradient times the (M, K) activations, the weight's gradient), in turn:

1. ``burst``: after ``--idle-s`` idle seconds, the harness's protocol (calibration.harness: 10 warm-up
   runs, then 10 timed, the mean of the middle 5 of their CUDA-event times);
2. ``sustained``: back to back for ``--sustain-s`` seconds in batches of about 20 ms, each batch timed
   with CUDA events; the mean per GEMM over the last third.

JSON lines in ``--out`` (``{"shape", "kind", "burst_ms", "sustained_ms", "ratio", "tail_unix"}``; ``tail_unix``
is the wall-clock window of the last third, to read the SM clock from nvidia-smi beside it) and a table last. The
power-cap model (calibration.power_cap) prices every tensor-core kernel with the 8192-cube GEMM's
curve; a ratio well under that GEMM's says the size matters.

    PYTHONPATH=. python validation/probe_gemm_sizes_cap.py --out out/gemm_sizes.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

#: (kind, M, K, N): the power probe's GEMM first and last (the chip's drift), between them train_3d.py's
#: d2048-L8-b2 GEMMs (4096 tokens: QKV forward, dgrad and wgrad, the projection, MLP-up, MLP-down, the LM
#: head), d4096-L8-b1's MLP-up (2048 tokens) and d6144-L2-b4's (8192 tokens)
SHAPES = (("mm", 8192, 8192, 8192), ("fwd", 4096, 2048, 6144), ("dgrad", 4096, 2048, 6144),
          ("wgrad", 4096, 2048, 6144), ("fwd", 4096, 2048, 2048), ("fwd", 4096, 2048, 8192),
          ("fwd", 4096, 8192, 2048), ("fwd", 4096, 2048, 50304), ("fwd", 2048, 4096, 16384),
          ("fwd", 8192, 6144, 24576), ("mm", 8192, 8192, 8192))


def timed_mean(torch, fn, runs: int) -> float:
    """Seconds per run of ``fn`` over ``runs`` runs, one pair of CUDA events around them."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(runs):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e-3 / runs


def gemm(torch, kind: str, m: int, k: int, n: int):
    """The GEMM as a callable, its operands made once (bf16, N(0, 1))."""
    def r(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    if kind == "mm":
        a, b = r(m, k), r(k, n)
        return lambda: torch.mm(a, b)
    if kind == "fwd":
        x, w = r(m, k), r(n, k)
        return lambda: torch.nn.functional.linear(x, w)
    if kind == "dgrad":
        g, w = r(m, n), r(n, k)
        return lambda: torch.mm(g, w)
    if kind == "wgrad":
        g, x = r(m, n), r(m, k)
        return lambda: torch.mm(g.t(), x)
    raise ValueError(f"unknown GEMM kind {kind!r}")


def kernel_names(torch, fn) -> list[str]:
    """The CUDA kernels one call of ``fn`` launches, by name (to find the same GEMM in a training
    iteration's profile)."""
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})
    except Exception as exc:  # the names are a help to read the profiles, not the measurement
        return [f"profiler failed: {exc}"]


def one_shape(torch, kind: str, m: int, k: int, n: int, idle_s: float, sustain_s: float) -> dict:
    fn = gemm(torch, kind, m, k, n)
    names = kernel_names(torch, fn)
    torch.cuda.synchronize()
    time.sleep(idle_s)
    for _ in range(10):  # the harness's warm-up
        fn()
    runs = sorted(timed_mean(torch, fn, 1) for _ in range(10))
    burst = statistics.mean(runs[2:7])
    one = max(burst, 1e-6)
    batch = max(1, int(0.02 / one))
    per, stamps, t0 = [], [], time.perf_counter()
    while time.perf_counter() - t0 < sustain_s:
        per.append(timed_mean(torch, fn, batch))
        stamps.append(time.time())
    n_tail = max(1, len(per) // 3)
    sustained = statistics.mean(per[-n_tail:])
    return {"shape": f"{m}x{k}x{n}", "kind": kind, "burst_ms": 1e3 * burst, "sustained_ms": 1e3 * sustained,
            "first_batch_ms": 1e3 * per[0], "kernels": names, "ratio": sustained / burst,
            "tflops_burst": 2 * m * k * n / burst / 1e12,
            "tail_unix": [stamps[-n_tail - 1] if len(stamps) > n_tail else stamps[0], stamps[-1]]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--idle-s", type=float, default=3.0)
    p.add_argument("--sustain-s", type=float, default=8.0)
    args = p.parse_args()
    import torch

    rows = []
    with open(args.out, "a") as fh:
        for kind, m, k, n in SHAPES:
            r = one_shape(torch, kind, m, k, n, args.idle_s, args.sustain_s)
            r["gpu"] = torch.cuda.get_device_name()
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            rows.append(r)
            torch.cuda.empty_cache()
            print(f"{kind:5s} {r['shape']:18s} burst {r['burst_ms']:8.3f} ms ({r['tflops_burst']:5.0f} TFLOP/s)  "
                  f"sustained {r['sustained_ms']:8.3f} ms  x{r['ratio']:.3f}", flush=True)


if __name__ == "__main__":
    main()
