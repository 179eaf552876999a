"""The simulation on the ten paper cases (reference samples): Eq. 7 as its special case, and the causes.

The issue asked for realistic >= ideal. That does not hold, for a reason the attribution
shows: Eq. 7 charges every stage the slowest stage's forward and backward, so giving each
stage its own time can only shorten the pipeline (``unequal_stages`` <= 0), while the
communication Eq. 7 leaves out adds 0-25 ms on these layouts. What must hold, and is
tested here: the ideal simulation equals Eq. 7; every communication effect adds time
(>= 0); the realistic simulation is never faster than the one with only the stages'
own times; the attribution adds up to the difference.
"""

import pytest

from trainsim.sim.compare import compare
from trainsim.sim.engine import SimOptions, simulate

ONLY_OWN_TIMES = SimOptions(own_stage_times=True, p2p_transfers=False, bucketed_dp=False, contention=False)


@pytest.fixture(scope="module")
def comparisons(paper_predictions):
    return {name: (pred, compare(pred.costs, pred.scenario.cluster)) for name, pred in paper_predictions.items()}


def test_ideal_simulation_equals_eq7(paper_predictions):
    for name, pred in paper_predictions.items():
        ideal = simulate(pred.costs, pred.scenario.cluster, mode="ideal")
        assert ideal.iteration_s == pytest.approx(pred.eq7.iteration_s, rel=1e-9), name


def test_attribution_adds_up_and_has_the_right_signs(comparisons):
    for name, (_, c) in comparisons.items():
        assert sum(c.attribution.values()) == pytest.approx(c.sim_s - c.eq7_s, rel=1e-9, abs=1e-9), name
        assert c.attribution["unequal_stages"] <= 1e-9, name
        for cause in ("exposed_p2p", "exposed_dp_allreduce", "link_contention"):
            assert c.attribution[cause] >= -1e-9, (name, cause, c.attribution[cause])


def test_communication_never_makes_the_realistic_run_faster(comparisons):
    for name, (pred, c) in comparisons.items():
        own = simulate(pred.costs, pred.scenario.cluster, options=ONLY_OWN_TIMES).iteration_s
        assert c.sim_s >= own - 1e-9, name
        realistic = simulate(pred.costs, pred.scenario.cluster)
        assert realistic.iteration_s == pytest.approx(c.sim_s, rel=1e-12), name


def test_vista_mp_traffic_contends_on_the_network(comparisons):
    # one GPU per node: MP all-reduces share the NIC with P2P traffic; on Perlmutter they stay on NVLink
    for case in ("gpt20b-4-4-8", "llemma7b-4-2-2"):
        assert comparisons[f"paper-{case}-vista"][1].attribution["link_contention"] > 1e-3
        assert comparisons[f"paper-{case}-perlmutter"][1].attribution["link_contention"] < 1e-3
