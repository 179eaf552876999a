"""Experiment (issue 13): does a congestion episode that adds *latency per protocol step*, instead
of taking bandwidth away, make the simulated spread depend on the layout the way the Vista logs do
(busy day: 4-8-4 +71 %, 4-4-8 +21 % mean over min, a ratio of 3.4)?

It runs the two paper layouts with a preset and ``congestion.nic.latency_s`` set to each given
value (the model's own step latency: each MP all-reduce of a step waits 2 (mp - 1) ring steps, a
P2P send one), optionally with the preset's bandwidth factor replaced (``--bandwidth-factor 1``:
latency only), and prints each layout's mean over min and their ratio.

    python validation/experiments/jitter_latency_per_step.py vista-busy 0,0.0003,0.001 --bandwidth-factor 1

The table in docs/jitter.md ("Step latency: how it was found") starts from the busy day's
bandwidth-only fit (``--set noise.nic.sigma=0.2806 --set congestion.nic.mean_on_s=3.298 --set
congestion.nic.mean_off_s=4.003``, bandwidth factor 0.2673), the preset before the step latency.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import warnings

LAYOUTS = ("paper-gpt20b-4-4-8-vista", "paper-gpt20b-4-8-4-vista")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("preset")
    p.add_argument("latencies", help="comma-separated seconds per protocol step")
    p.add_argument("--bandwidth-factor", type=float, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="another simulation.jitter value, e.g. congestion.nic.mean_on_s=3.298")
    p.add_argument("-n", type=int, default=100)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    from trainsim.scenarios.cli import main as cli

    key = "simulation.jitter.congestion.nic"
    extra = ["--set", f"{key}.scope=tier"]
    extra += [a for kv in args.set for a in ("--set", f"simulation.jitter.{kv}")]
    if args.bandwidth_factor is not None:
        extra += ["--set", f"{key}.bandwidth_factor={args.bandwidth_factor}"]
    for latency in (float(x) for x in args.latencies.split(",")):
        spread = []
        for case in LAYOUTS:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                cli(["jitter", case, "-n", str(args.n), "--jobs", "2", "--shares", "0", "--set",
                     f"simulation.jitter.preset={args.preset}", *extra, "--set", f"{key}.latency_s={latency}",
                     "--json", "-q"])
            d = json.loads(buf.getvalue())
            spread.append(d["mean_s"] / d["min_s"] - 1)
        print(f"L = {latency * 1e3:.2f} ms: 4-4-8 {spread[0]:+.1%}, 4-8-4 {spread[1]:+.1%}, "
              f"ratio {spread[1] / spread[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
