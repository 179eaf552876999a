"""Time 1,000 jittered iterations of paper-gpt20b-4-4-8-vista (128 GPUs) with --jobs 2.

Runs ``trainsim jitter``'s Monte Carlo (vista preset) end to end, worker start-up included,
without the per-kind ablation (``--shares 0``; the ablation re-runs up to 200 seeds per
jitter source and is timed separately). Uses the reference Vista profile when the
reference samples are found (TRAINSIM_REFERENCE_DATA), else the roofline profile; the
profile is fitted once before timing. Prints the median of ``--repeats`` runs.

    python benchmarks/bench_jitter.py [--repeats 3] [--n 1000] [--jobs 2] [--profile roofline]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainsim.scenarios.compose import predict  # noqa: E402
from trainsim.scenarios.montecarlo import run_monte_carlo  # noqa: E402
from trainsim.scenarios.schema import load_scenario  # noqa: E402
from trainsim.sim.jitter_config import parse_jitter  # noqa: E402

SCENARIO = "paper-gpt20b-4-4-8-vista"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--profile", default=None, help="default: reference:Vista if the samples are found, else roofline")
    ap.add_argument("--shares", type=int, default=0)
    args = ap.parse_args()
    ref = os.environ.get("TRAINSIM_REFERENCE_DATA", str(ROOT.parent / "shared/reference-data/estimate-train-time"))
    profile = args.profile or ("reference:Vista" if Path(ref, "Vista").is_dir() else "roofline")
    sc = load_scenario(SCENARIO, [f"profile.name={profile}", "simulation.jitter.preset=vista"])
    costs = predict(sc, reference_data=ref).costs
    jitter = parse_jitter(sc.simulation.jitter)
    walls, res = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = run_monte_carlo(costs, sc.cluster, jitter, args.n, seed=0, jobs=args.jobs, share_samples=args.shares)
        walls.append(time.perf_counter() - t0)
    med = statistics.median(walls)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"{SCENARIO} profile {profile}: {args.n} iterations, jobs {args.jobs}, shares {args.shares}")
    print(f"wall per run: {', '.join(f'{w:.2f}' for w in walls)} s; median {med:.2f} s; "
          f"{args.n / med:.1f} samples/s")
    print(f"deterministic {res.deterministic_s:.3f} s; min {res.min_s:.3f} mean {res.mean_s:.3f} "
          f"p95 {res.p95_s:.3f} max {res.max_s:.3f}; mean over min {res.avg_over_min_pct:+.1f}%")


if __name__ == "__main__":
    main()
