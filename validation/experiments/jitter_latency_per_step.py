"""Experiment (issue 13, not part of the model): does a congestion episode that adds *latency per
protocol step*, instead of taking bandwidth away, make the simulated spread depend on the layout
the way the Vista logs do (busy day: 4-8-4 +71 %, 4-4-8 +21 % mean over min, a ratio of 3.4)?

While the NIC tier's episode is on, each MP all-reduce of a step gains 2 (mp - 1) ring steps of
``L`` seconds (``ALLREDUCES_PER_STEP`` of them per forward or backward step: gpt20b, 11 layers a
stage, 2 per layer), and each P2P send one step. The rest of the preset is kept, with its
bandwidth factor (``--bandwidth-factor``, e.g. 0.99 for latency only). The engine's functions are
patched in this process only; nothing here changes trainsim.

    python validation/experiments/jitter_latency_per_step.py vista-busy 0.0003,0.001 --bandwidth-factor 0.99
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import warnings

import trainsim.sim.jitter as jitter
import trainsim.sim.processes as processes

ALLREDUCES_PER_STEP = 22  # gpt20b on pp4: 11 layers a stage, 2 MP all-reduces a layer per step
STATE = {"on": False, "latency_s": 0.0, "mp": 1}
_comm = processes.comm


def congestion_process(env, set_capacities, links, nominal, c, g):  # sim.jitter's, noting the state
    on = g.random() < c.p_on
    while True:
        if on:
            STATE["on"] = True
            set_capacities({link: nominal[link] * c.bandwidth_factor for link in links})
            yield env.timeout(c.mean_on_s * g.standard_exponential())
            set_capacities({link: nominal[link] for link in links})
            STATE["on"] = False
        else:
            yield env.timeout(c.mean_off_s * g.standard_exponential())
        on = not on


def comm(ctx, base_s, rates, kind, key):  # sim.processes's, with the episode's latency added
    if STATE["on"]:
        if kind == processes.MP:
            base_s += ALLREDUCES_PER_STEP * 2 * (STATE["mp"] - 1) * STATE["latency_s"]
        elif kind == processes.PP:
            base_s += STATE["latency_s"]
    return _comm(ctx, base_s, rates, kind, key)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("preset")
    p.add_argument("latencies", help="comma-separated seconds per ring step")
    p.add_argument("--bandwidth-factor", type=float, default=None)
    p.add_argument("-n", type=int, default=100)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    jitter.congestion_process = congestion_process
    processes.comm = comm
    from trainsim.scenarios.cli import main as cli

    extra = ["--set", f"simulation.jitter.congestion.nic.bandwidth_factor={args.bandwidth_factor}"] \
        if args.bandwidth_factor is not None else []
    for latency in (float(x) for x in args.latencies.split(",")):
        out = []
        for case, mp in (("paper-gpt20b-4-4-8-vista", 4), ("paper-gpt20b-4-8-4-vista", 8)):
            STATE.update(latency_s=latency, mp=mp, on=False)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                cli(["jitter", case, "-n", str(args.n), "--jobs", "1", "--shares", "0", "--set",
                     f"simulation.jitter.preset={args.preset}", *extra, "--json", "-q"])
            d = json.loads(buf.getvalue())
            out.append(d["mean_s"] / d["min_s"] - 1)
        print(f"L = {latency * 1e3:.2f} ms: 4-4-8 {out[0]:+.1%}, 4-8-4 {out[1]:+.1%}, ratio {out[1] / out[0]:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
