"""Eq. 7 beside the simulation, with every difference attributed to a cause.

A telescoping chain of simulations switches Eq. 7's assumptions off one at a time
(:class:`sim.engine.SimOptions`); each cause gets the change it made, so the
attribution sums to ``sim_s - eq7_s`` exactly (up to float rounding):

=====================  ==============================================================
``residual``           ideal simulation of the scenario's schedule - Eq. 7 (which has the 1F1B,
                       GPipe and interleaved 1F1B closed forms): float rounding only, ~1e-15 relative
``unequal_stages``     each stage's own forward/backward time instead of the maximum
``host_ahead``         a pipeline stage whose host issues its schedule ahead keeps a host clock
                       (the fill and drain are the GPUs') instead of each step's host excess
``exposed_p2p``        P2P as a blocking rendezvous transfer instead of sender compute (uncontended)
``exposed_dp_allreduce``  bucketed DP all-reduce as a collective of all replicas (overlapping
                       the last backward with ``overlap_dp``) instead of Eq. 7's tail
``link_contention``    transfers share links (max-min fair) instead of running alone
``interference``       compute and DP all-reduces overlapping on a GPU slow each other (the
                       profile's measured factors; 0 without them)
=====================  ==============================================================

The order matters (effects interact); it follows the order the design lists them in.
``exposed_p2p`` is what the rendezvous adds: a sender waiting for its receiver to post the
matching receive. P2P traffic that collides with other traffic is counted under
``link_contention``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainsim.operators.spec import Schedule
from trainsim.sim.costs import IterationCosts
from trainsim.sim.engine import IDEAL, SimOptions, simulate
from trainsim.sim.eq7 import eq7
from trainsim.topology import ClusterSpec

CAUSES = ("residual", "unequal_stages", "host_ahead", "exposed_p2p", "exposed_dp_allreduce", "link_contention",
          "interference")

_CHAIN = (
    ("unequal_stages", SimOptions(own_stage_times=True, p2p_transfers=False, bucketed_dp=False, contention=False,
                                  interference=False, host_clock=False)),
    ("host_ahead", SimOptions(own_stage_times=True, p2p_transfers=False, bucketed_dp=False, contention=False,
                              interference=False)),
    ("exposed_p2p", SimOptions(own_stage_times=True, p2p_transfers=True, bucketed_dp=False, contention=False,
                               interference=False)),
    ("exposed_dp_allreduce", SimOptions(own_stage_times=True, p2p_transfers=True, bucketed_dp=True,
                                        contention=False, interference=False)),
    ("link_contention", SimOptions(own_stage_times=True, p2p_transfers=True, bucketed_dp=True, contention=True,
                                   interference=False)),
    ("interference", SimOptions(own_stage_times=True, p2p_transfers=True, bucketed_dp=True, contention=True,
                                interference=True)),
)


@dataclass(frozen=True)
class Comparison:
    eq7_s: float
    sim_s: float
    rel_diff: float  # (sim_s - eq7_s) / eq7_s
    attribution: dict[str, float]  # cause -> seconds; sums to sim_s - eq7_s
    ideal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"eq7_s": self.eq7_s, "sim_s": self.sim_s, "rel_diff": self.rel_diff,
                "attribution": dict(self.attribution), "ideal": self.ideal}


def compare(costs: IterationCosts, cluster: ClusterSpec | None, ideal: bool = False, seed: int = 0,
            overlap_dp: bool = False, schedule: Schedule | str | None = None) -> Comparison:
    e = eq7(costs).iteration_s
    if schedule is None:
        schedule = costs.parallelism.schedule
    prev = simulate(costs, cluster, seed=seed, options=IDEAL, schedule=schedule).iteration_s
    attribution = {cause: 0.0 for cause in CAUSES}
    attribution["residual"] = prev - e
    if not ideal:
        ahead = any(st.host_ahead for st in costs.stages)
        for cause, opts in _CHAIN:
            if cause == "host_ahead" and not ahead:  # no stage keeps a host clock: the same run again
                continue
            opts = dataclasses.replace(opts, overlap_dp=overlap_dp)
            now = simulate(costs, cluster, seed=seed, options=opts, schedule=schedule).iteration_s
            attribution[cause] = now - prev
            prev = now
    rel = (prev - e) / e if e > 0 else 0.0
    return Comparison(eq7_s=e, sim_s=prev, rel_diff=rel, attribution=attribution, ideal=ideal)
