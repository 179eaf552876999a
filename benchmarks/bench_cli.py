"""Whole-process timings of the `trainsim` command, as a user runs it (warm profile cache).

Usage: python benchmarks/bench_cli.py [--repeat 7] [--big]

Each row runs the installed `trainsim` script (the one beside this interpreter, so a pyenv
shim's own start-up is not counted) in a fresh process and reports the median wall time and the
peak RSS of the child. The first call of each command fills the profile cache and is not
counted. `--big` adds the bundled 16,384-GPU scenario (run, and run with a trace).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def trainsim_exe() -> list[str]:
    beside = Path(sys.executable).with_name("trainsim")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("trainsim")
    return [found] if found else [sys.executable, "-m", "trainsim"]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process; raises if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as on a user's machine
    env.setdefault("TRAINSIM_CACHE", tempfile.mkdtemp(prefix="trainsim-bench-"))
    exe = trainsim_exe()
    out = Path(tempfile.mkdtemp(prefix="trainsim-bench-out-"))
    rows = [
        ("predict gpt20b-dgxh100 --json", ["predict", "gpt20b-dgxh100", "--json"], args.repeat),
        ("run gpt20b-dgxh100 --json", ["run", "gpt20b-dgxh100", "--json"], args.repeat),
        ("scenarios", ["scenarios"], args.repeat),
    ]
    if args.big:
        rows += [
            ("run gpt175b-dgxh100-16k --json", ["run", "gpt175b-dgxh100-16k", "--json"], 3),
            ("run gpt175b-dgxh100-16k --trace t.json", ["run", "gpt175b-dgxh100-16k", "--trace",
                                                        str(out / "t.json")], 1),
            ("run gpt175b-dgxh100-16k --trace all.json --trace-replicas all",
             ["run", "gpt175b-dgxh100-16k", "--trace", str(out / "all.json"), "--trace-replicas", "all"], 1),
        ]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; {' '.join(exe)}")
    print("| command | runs | median s | min s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for label, argv, n in rows:
        timed(exe + argv, env)  # warm-up: fills the profile cache, writes bytecode
        walls, rss = [], 0.0
        for _ in range(n):
            w, r = timed(exe + argv, env)
            walls.append(w)
            rss = max(rss, r)
        print(f"| `trainsim {label}` | {n} | {statistics.median(walls):.3f} | {min(walls):.3f} | {rss:.0f} |",
              flush=True)
    for f in sorted(out.glob("*.json")):
        print(f"{f.name}: {f.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
