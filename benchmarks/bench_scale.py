"""Time and peak memory of `trainsim run` against the GPU count, through the CLI as a user runs it.

Usage: python benchmarks/bench_scale.py [--repeat 3] [--sizes 1,8,16,32,128,1024]

One model and layout family, the bundled `gpt175b-dgxh100-128k` (175B-class GPT, PP16 MP8,
micro-batch 1, 16 micro-batches per replica, roofline profile), with its data parallelism set to
1, 8, 16, 32, 128 and 1024 replicas: 128, 1,024, 2,048, 4,096, 16,384 and 131,072 GPUs. Each
size runs the installed `trainsim` script in a fresh process (one warm-up, then ``--repeat``),
`trainsim run gpt175b-dgxh100-128k -q --set parallelism.dp=N`; the median wall time, the peak RSS
of the child (``os.wait4``) and the 1-minute load average around the runs are printed, then the
least-squares exponent of time against GPUs on a log-log scale (1.0: linear).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import trainsim_exe  # noqa: E402

SCENARIO = "gpt175b-dgxh100-128k"
GPUS_PER_REPLICA = 16 * 8  # pp * mp


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one child process; raises if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024, out


def exponent(gpus: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) on log(gpus)."""
    xs, ys = [math.log(g) for g in gpus], [math.log(s) for s in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="1,8,16,32,128,1024", help="data-parallel degrees (GPUs = 128 x dp)")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("TRAINSIM_CACHE", tempfile.mkdtemp(prefix="trainsim-bench-"))
    exe = trainsim_exe()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}; {' '.join(exe)} run {SCENARIO} -q "
          f"--set parallelism.dp=N; median of {args.repeat}")
    print("| GPUs | dp | runs s | median s | peak RSS MiB | simulated iteration | load avg (1 min) |")
    print("|---|---|---|---|---|---|---|")
    gpus, medians = [], []
    for dp in [int(x) for x in args.sizes.split(",")]:
        cmd = exe + ["run", SCENARIO, "-q", "--set", f"parallelism.dp={dp}"]
        timed(cmd, env)  # warm-up: bytecode
        load0 = os.getloadavg()[0]
        walls, rss, out = [], 0.0, ""
        for _ in range(args.repeat):
            w, r, out = timed(cmd, env)
            walls.append(w)
            rss = max(rss, r)
        load1 = os.getloadavg()[0]
        it = next((ln.split()[-2] + " s" for ln in out.splitlines() if ln.startswith("iteration time")), "?")
        med = statistics.median(walls)
        gpus.append(dp * GPUS_PER_REPLICA)
        medians.append(med)
        print(f"| {dp * GPUS_PER_REPLICA:,} | {dp} | {', '.join(f'{w:.2f}' for w in walls)} | {med:.2f} | {rss:.0f} | "
              f"{it} | {load0:.2f} -> {load1:.2f} |", flush=True)
    if len(gpus) > 1:
        print(f"exponent of time vs GPUs (least squares, log-log, {gpus[0]:,} to {gpus[-1]:,} GPUs): "
              f"{exponent(gpus, medians):.3f}; largest over smallest: {medians[-1] / medians[0]:.1f}x for "
              f"{gpus[-1] / gpus[0]:,.0f}x the GPUs")


if __name__ == "__main__":
    main()
