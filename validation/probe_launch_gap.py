"""Does an operator's sample see the GPU's gap between one kernel and the next?

In a GPU-paced train_3d.py iteration the GPU idles ~2 µs between almost every two kernels although the
host launched the next one long before (machine EB's timelines: median 1.8-2.1 µs, 2.4-3.3 % of a d2048 or
d4096 iteration; docs/efficiency.md). The operator harness (calibration.harness.time_bench, GPU time only)
brackets each run with its own pair of CUDA events. Per operator, one GPU:

* ``harness_us``: the harness's figure (the mean of the middle five of ten timed runs, queued behind a
  sleep kernel);
* ``stream_us``: the same operator run N times back to back behind a sleep kernel, one event pair around
  all N, per run: what it costs in a stream of kernels, its gaps to the next run included;
* ``kernels``: the kernels one run launches (the profiler's count).

``stream_us - harness_us`` is what a sample misses per run, where positive. JSON lines in ``--out``, a table last.

    PYTHONPATH=. python validation/probe_launch_gap.py --out out/launch_gap.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_gemm_sizes_cap import timed_mean  # noqa: E402  (seconds per run, one event pair around them)

STREAM_RUNS = 400


def operators(torch: Any) -> dict[str, Callable[[], Any]]:
    def r(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    x, y, z = r(4096, 2048), r(4096, 2048), r(4096, 2048)
    t1, t2 = r(1024), r(1024)
    w, b = r(6144, 2048), r(6144)
    ln_w, ln_b = r(2048), r(2048)
    return {"add_tiny": lambda: t1 + t2, "add_4096x2048": lambda: x + y, "add_mul_4096x2048": lambda: (x + y) * z,
            "cast_4096x2048": lambda: x.float(), "layernorm_4096x2048": lambda: torch.nn.functional.layer_norm(
                x, (2048,), ln_w, ln_b), "gelu_4096x2048": lambda: torch.nn.functional.gelu(x),
            "linear_bias_4096x2048x6144": lambda: torch.nn.functional.linear(x, w, b)}


def kernel_count(torch: Any, fn: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if str(e.device_type).endswith("CUDA"))


def stream_us(torch: Any, env: Any, fn: Callable[[], Any], runs: int = STREAM_RUNS) -> float:
    """Per run, ``runs`` runs back to back behind a sleep kernel, one event pair around them."""
    out = []
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(30.0 * env.sleep_cycles_per_ms))  # 30 ms: the host queues every run meanwhile
        out.append(1e6 * timed_mean(torch, fn, runs))
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from trainsim.calibration.harness import Bench, make_env, robust_mean, time_bench

    env = make_env("cuda", cpu_ahead=True)
    torch = env.torch
    with open(args.out, "a") as fh:
        for name, fn in operators(torch).items():
            fn()
            bench = Bench(run=lambda _i, f=fn: f(), sets=1, bytes_per_set=0)
            harness = statistics.median(robust_mean(time_bench(bench, env)) for _ in range(3))
            stream = stream_us(torch, env, fn)
            row = {"name": name, "harness_us": harness, "stream_us": stream, "kernels": kernel_count(torch, fn),
                   "gpu": torch.cuda.get_device_name()}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(f"{name:28s} kernels {row['kernels']}  harness {harness:8.2f} us  stream {stream:8.2f} us  "
                  f"stream - harness {stream - harness:+6.2f} us", flush=True)


if __name__ == "__main__":
    main()
