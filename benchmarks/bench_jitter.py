"""Time `trainsim jitter` and `trainsim jitter fit` through the command line, as a user runs them.

* ``mc``: 1,000 jittered iterations of paper-gpt20b-4-4-8-vista (128 GPUs) with ``--jobs 2``,
  the ``vista`` preset (the busy-day fit), as a user runs it: the default, no per-source ablation
  (``--shares``, opt-in since 2026-11-29), worker start-up included.
* ``fit``: ``jitter fit`` of the busy Vista day, 2 layouts x 51 iterations (jobs 127321, 127322),
  ``--jobs 2``.

Each is run ``--repeats`` times in a fresh process; the median wall time is printed. The
reference Vista profile is fitted and cached by a first, untimed run. Needs the reference
samples (TRAINSIM_REFERENCE_DATA, default ../shared/reference-data/estimate-train-time) and, for
``fit``, the training logs (TRAINSIM_TRAINING_LOGS, default ../shared/training-logs).

    python benchmarks/bench_jitter.py [--what mc,fit] [--repeats 3] [--n 1000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "paper-gpt20b-4-4-8-vista"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", default="mc,fit")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # timings with cached bytecode, as an installed package runs
    env.setdefault("TRAINSIM_REFERENCE_DATA", str(ROOT.parent / "shared/reference-data/estimate-train-time"))
    logs = Path(env.get("TRAINSIM_TRAINING_LOGS", ROOT.parent / "shared/training-logs")) / "iterations.csv"
    cli = [sys.executable, "-m", "trainsim"]
    runs = {
        "mc": cli + ["jitter", SCENARIO, "-n", str(args.n), "--jobs", str(args.jobs),
                     "--set", "simulation.jitter.preset=vista", "-q"],
        "fit": cli + ["jitter", "fit", str(logs), "--job", "127321", "--job", "127322", "--jobs", str(args.jobs),
                      "-q"],
    }
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    subprocess.run(cli + ["predict", SCENARIO, "-q"], check=True, env=env, stdout=subprocess.DEVNULL)  # profile cache
    for what in args.what.split(","):
        walls = [timed(runs[what], env) for _ in range(args.repeats)]
        print(f"{what}: {' '.join(runs[what][2:])}")
        print(f"  wall per run: {', '.join(f'{w:.1f}' for w in walls)} s; median {statistics.median(walls):.1f} s")


if __name__ == "__main__":
    main()
