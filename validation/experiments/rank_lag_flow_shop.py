"""Experiment: does coupling the ranks' host-GPU flow shops add more than the slowest rank's lag?

Under DTensor TP every rank's GPU waits at each all-reduce for every rank to have issued it. With each
rank's host time per micro-batch spread by a factor (CV ``--sigma``, drawn per rank and micro-batch),
a host-bound micro-batch takes the slowest rank's host time: E[max of n factors] times the typical
one at the tiny shapes. At shapes where host and GPU are close, the coupled flow shop could lose more.
This runs the simulation's own flow-shop inputs (``sim.host_time.issue_flow_shop``: each operator's host
issue time, GPU price and the all-reduce after it) for the TP rows of a measured table, as n coupled
ranks with random host factors, and compares the mean micro-batch with the deterministic flow shop whose
host is scaled by the tiny shapes' expected lag (the model of ``calibration/rank_spread.py``). The
host line is the profile's as the simulation uses it (with its own lag where it has one): the test is
the ratio, not the line.

    python validation/experiments/rank_lag_flow_shop.py \\
        validation/parallel_head_host_h200_4gpu_machineBG/gpu_bound/measured_hf_parallel.csv --sigma 0.15

Result (2026-11-28, that table's shapes, sigma 0.15, 300 draws): the coupled micro-batch is the scaled
deterministic one's x0.99-1.01 for 2 and 4 ranks, so the lag is all the coupling adds (docs/multi_gpu.md).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from trainsim.scenarios import compare_multi
from trainsim.sim import host_time


def operators(c: dict) -> np.ndarray:
    """Rows (host issue s, GPU s, all-reduce s after it) of one micro-batch in the simulation's own issue
    order (``sim.host_time.issue_order``), forward then backward."""
    order = host_time.issue_order(c["plan"], c["fwd"], c["bwd"], c["h"], c["ck"], c["ht"], c["after"])
    assert order is not None
    return np.array(order[0] + order[1])


def coupled(ops: np.ndarray, factors: np.ndarray, gpu: float = 1.0) -> float:
    """One micro-batch of len(factors) ranks: each host issues at its factor; each GPU runs an operator
    once issued and its previous one is done; an all-reduce starts when every rank's GPU reaches it."""
    host = np.zeros(len(factors))
    busy = np.zeros(len(factors))
    for issue, price, allreduce in ops:
        host = host + issue * factors
        busy = np.maximum(busy, host) + price * gpu
        if allreduce > 0:
            busy = np.full(len(factors), busy.max() + allreduce)
    return float(max(busy.max(), host.max()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--sigma", type=float, default=0.15)
    ap.add_argument("--draws", type=int, default=300)
    args = ap.parse_args(argv)
    caps: list[dict] = []
    real = host_time.issue_flow_shop

    def spy(plan, fwd, bwd, h, ck=0.0, ht=None, after=None):
        caps.append({"plan": plan, "fwd": fwd, "bwd": bwd, "h": h, "ck": ck, "ht": ht, "after": after})
        return real(plan, fwd, bwd, h, ck, ht, after)

    host_time.issue_flow_shop = spy  # type: ignore[assignment]
    compare_multi.rows(args.table)
    rng = np.random.default_rng(0)
    seen = set()
    for c in caps:
        if c["plan"].runtime != "dtensor_tp":
            continue
        ops = operators(c)
        key = (c["plan"].encoders, round(float(ops[:, 1].sum()), 6))
        if key in seen:
            continue
        seen.add(key)
        host, gpu = ops[:, 0].sum(), ops[:, 1].sum() + ops[:, 2].sum()
        out = []
        for n in (2, 4):
            draw = [np.clip(1 + args.sigma * rng.standard_normal(n), 0.3, None) for _ in range(args.draws)]
            tiny = np.mean([coupled(ops, f, gpu=0.0) for f in draw]) / host  # the lag where the GPU is idle
            mean = np.mean([coupled(ops, f) for f in draw])
            out.append(f"{n} ranks: lag {tiny:.3f}, coupled / scaled deterministic "
                       f"{mean / coupled(ops, np.array([tiny])):.3f}")
        print(f"L{c['plan'].encoders}: host {host * 1e3:.1f} ms, GPU {gpu * 1e3:.1f} ms a micro-batch; "
              + "; ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
