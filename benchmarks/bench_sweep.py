"""A sweep of >= 200 layouts of a 16,384-GPU job through the CLI, with --jobs 1 and --jobs 2.

Usage: python benchmarks/bench_sweep.py [--repeat 3]

`trainsim sweep gpt175b-dgxh100-16k --pp 2,4,8,16 --mp 1,2,4,8 --cp 1,2 --sp both
--micro-batch 1,2 --schedule 1f1b,interleaved-1f1b --top 10 --json -q --jobs J`: 224 candidates
(4 pp x 7 mp/SP pairs x 2 cp x 2 b x 2 schedules), of which 203 are layouts the model can take
(the others: an interleaved schedule whose micro-batches are not a multiple of pp), pruned by
memory and by the closed-form bound, the rest simulated in full. Each run is the installed
`trainsim` script in a fresh process; the two --jobs settings alternate. Printed: wall seconds of
every run, medians, the jobs-1 over jobs-2 ratio, peak RSS of the process tree's largest member,
the 1-minute load average around each run, the counts (evaluated, simulated, pruned) and whether
every run gave the same JSON, byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import trainsim_exe  # noqa: E402
from bench_scale import timed  # noqa: E402

SWEEP = ["sweep", "gpt175b-dgxh100-16k", "--pp", "2,4,8,16", "--mp", "1,2,4,8", "--cp", "1,2", "--sp", "both",
         "--micro-batch", "1,2", "--schedule", "1f1b,interleaved-1f1b", "--top", "10", "--json", "-q"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", default="1,2")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("TRAINSIM_CACHE", tempfile.mkdtemp(prefix="trainsim-bench-"))
    exe = trainsim_exe()
    jobs = [int(j) for j in args.jobs.split(",")]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}; {' '.join(exe + SWEEP)} --jobs J")
    walls: dict[int, list[float]] = {j: [] for j in jobs}
    digests: dict[int, set[str]] = {j: set() for j in jobs}
    info = ""
    for k in range(args.repeat):
        for j in jobs:
            load0 = os.getloadavg()[0]
            w, rss, out = timed(exe + SWEEP + ["--jobs", str(j)], env)
            load1 = os.getloadavg()[0]
            walls[j].append(w)
            digests[j].add(hashlib.sha256(out.encode()).hexdigest()[:16])
            d = json.loads(out)
            info = (f"{d['layouts_tried']} layouts tried, {d['layouts_ranked']} ranked, {d['simulated']} simulated, "
                    f"pruned: {d['pruned']['memory']} by memory, {d['pruned']['bound']} by the bound; best "
                    f"{d['layouts'][0]['name']} {d['layouts'][0]['simulated_s']:.3f} s")
            print(f"run {k + 1} --jobs {j}: {w:.1f} s, peak RSS {rss:.0f} MiB, load {load0:.2f} -> {load1:.2f}",
                  flush=True)
    print(info)
    for j in jobs:
        print(f"--jobs {j}: median {statistics.median(walls[j]):.1f} s of {', '.join(f'{w:.1f}' for w in walls[j])}")
    if len(jobs) == 2:
        a, b = (statistics.median(walls[j]) for j in jobs)
        print(f"ratio --jobs {jobs[0]} / --jobs {jobs[1]}: {a / b:.2f}")
    same = len(set().union(*digests.values())) == 1
    print(f"identical JSON for every run and --jobs: {same} ({sorted(set().union(*digests.values()))})")


if __name__ == "__main__":
    main()
