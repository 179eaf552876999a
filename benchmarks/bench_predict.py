"""Speed of `trainsim predict` (issue 2's targets).

* end to end: `trainsim predict <paper case> --json` in a fresh process with a warm profile
  cache (target < 2 s);
* Eq. 7 in process: `sim.eq7.eq7(costs)` (target < 5 ms), and the whole in-process
  prediction (stage plans + batch operator prediction + costs + Eq. 7) for comparison.

Usage: TRAINSIM_REFERENCE_DATA=... python benchmarks/bench_predict.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--case", default="paper-gpt20b-4-4-8-perlmutter")
    args = ap.parse_args()
    cache = os.environ.setdefault("TRAINSIM_CACHE", tempfile.mkdtemp(prefix="trainsim-bench-"))

    # Warm the cache once (a cold fit), then time fresh processes.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainsim", "predict", args.case, "--json"], check=True,
                   capture_output=True)
    first = time.perf_counter() - t0
    e2e = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainsim", "predict", args.case, "--json"], check=True,
                       capture_output=True)
        e2e.append(time.perf_counter() - t0)

    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario
    from trainsim.sim.eq7 import eq7

    sc = load_scenario(args.case)
    pred = predict(sc)  # loads the profile into this process
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        eq7(pred.costs)
    eq7_us = (time.perf_counter() - t0) / n * 1e6
    whole = []
    for _ in range(args.repeat * 4):
        t0 = time.perf_counter()
        predict(sc)
        whole.append(time.perf_counter() - t0)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; cache {cache}")
    print(f"case {args.case}")
    print(f"first call (cold fit if the cache was empty)     {first:8.2f} s")
    print(f"trainsim predict --json, warm, fresh process     {statistics.median(e2e):8.3f} s  (median of {len(e2e)})")
    print(f"in-process predict (plans+ops+costs+Eq. 7)       {statistics.median(whole) * 1e3:8.2f} ms")
    print(f"Eq. 7 on precomputed stage costs                 {eq7_us:8.2f} us")


if __name__ == "__main__":
    main()
