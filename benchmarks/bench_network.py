"""The link-sharing model through the command line, as a user runs it: this checkout against a baseline.

Usage (from the repository root)::

    cp -r . /tmp/trainsim_old            # before changing sim/network.py: the baseline tree
    python benchmarks/bench_network.py --baseline /tmp/trainsim_old [--repeat 3] [--profile]

Each run is ``python -m trainsim run CASE -q`` in a fresh process whose ``PYTHONPATH`` is the tree
under test (the header prints which ``sim/network.py`` each tree imports), bytecode written (the
session's ``PYTHONDONTWRITEBYTECODE`` removed, as on a user's machine), each tree with its own warm
profile cache (a first, uncounted run fills it). Trees alternate run by run, so a noisy machine
slows both alike. Reported: median and min wall seconds of the whole command, the simulation's own
seconds and event count as the command prints them, and the printed iteration time, which must be
the same for every tree. ``--profile`` adds a cProfile of the first case in this checkout.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("gpt175b-dgxh100-16k", "gpt20b-dgxh100")
_EVENTS = re.compile(r"simulated ([\d,]+) events in ([\d.]+) s")
_ITERATION = re.compile(r"iteration time \(simulated\)\s+(\S+ \S+)")


def tree_env(tree: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    env["TRAINSIM_CACHE"] = str(cache)
    return env


def network_file(tree: Path, env: dict[str, str]) -> str:
    code = "import trainsim.sim.network as n; print(n.__file__)"
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True,
                          check=True).stdout.strip()


def run_once(tree: Path, env: dict[str, str], case: str) -> tuple[float, str, int, float]:
    """Wall seconds, printed iteration time, events and simulation seconds of one CLI run."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainsim", "run", case, "-q"], env=env, cwd=tree,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{tree}: trainsim run {case} failed:\n{done.stderr}")
    it, ev = _ITERATION.search(done.stdout), _EVENTS.search(done.stdout)
    if it is None or ev is None:
        raise SystemExit(f"{tree}: unexpected output of trainsim run {case}:\n{done.stdout}")
    return wall, it.group(1), int(ev.group(1).replace(",", "")), float(ev.group(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="a copy of the checkout before the change")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tree and case (0: none)")
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--profile", action="store_true", help="cProfile the first case in this checkout")
    args = ap.parse_args()
    trees = {"new": ROOT} | ({"old": args.baseline.resolve()} if args.baseline else {})
    envs = {name: tree_env(tree, Path(tempfile.mkdtemp(prefix=f"trainsim-bench-{name}-")))
            for name, tree in trees.items()}
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}")
    for name, tree in trees.items():
        print(f"# {name}: {network_file(tree, envs[name])}")
    print("| case | tree | runs | median s | min s | sim s (median) | events | iteration |")
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases if args.repeat > 0 else ():
        for name, tree in trees.items():
            run_once(tree, envs[name], case)  # warm-up: fills the profile cache, writes bytecode
        got: dict[str, list[tuple[float, str, int, float]]] = {name: [] for name in trees}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                got[name].append(run_once(tree, envs[name], case))
        for name, runs in got.items():
            walls = [w for w, _, _, _ in runs]
            sims = [s for _, _, _, s in runs]
            its = {i for _, i, _, _ in runs}
            events = {e for _, _, e, _ in runs}
            print(f"| {case} | {name} | {len(runs)} | {statistics.median(walls):.2f} | {min(walls):.2f} | "
                  f"{statistics.median(sims):.2f} | {', '.join(f'{e:,}' for e in sorted(events))} | "
                  f"{', '.join(sorted(its))} |", flush=True)
        printed = {i for runs in got.values() for _, i, _, _ in runs}
        if len(printed) != 1:
            print(f"WARNING: {case}: the trees print different iteration times: {sorted(printed)}")
    if args.profile:
        out = subprocess.run([sys.executable, "-m", "cProfile", "-s", "tottime", "-m", "trainsim", "run",
                              args.cases[0], "-q"], env=envs["new"], cwd=ROOT, capture_output=True, text=True)
        lines = out.stdout.splitlines()
        start = next((k for k, line in enumerate(lines) if "ncalls" in line), 0)
        print("\n".join(lines[start - 3:start + 20]))


if __name__ == "__main__":
    main()
