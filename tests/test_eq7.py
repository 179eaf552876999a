"""Eq. 7 by hand, and its equal-stage property."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainsim.operators import Parallelism
from trainsim.sim.costs import IterationCosts, StageCost
from trainsim.sim.eq7 import eq7


def stage(index, fwd, bwd, ar=0.0, upd=0.0, p2p_f=0.0, p2p_b=0.0, mp_f=0.0, mp_b=0.0):
    return StageCost(
        index=index, fwd_compute_s=fwd, bwd_compute_s=bwd, recompute_s=0.0, mp_fwd_s=mp_f, mp_bwd_s=mp_b,
        mp_allreduce_s=0.0, mp_fwd_count=0, mp_bwd_count=0, p2p_fwd_s=p2p_f, p2p_bwd_s=p2p_b,
        dp_bucket_s=(ar,) if ar else (), dp_allgather_s=0.0, optimizer_s=upd, params=1, fwd_flops=0.0,
        bwd_flops=0.0,
    )


def costs(stages, m):
    pp = len(stages)
    return IterationCosts(stages=tuple(stages), micro_batches=m, parallelism=Parallelism(pp=pp),
                          mp_span=(1, 1), dp_span=(1, 1), p2p_spans=((1, 2),) * (pp - 1))


def test_eq7_by_hand():
    # 3 stages, m = 4: (4 - 1 + 3) * (max F + max B) = 6 * (2 + 5) = 42
    st_ = [stage(0, 1.0, 3.0, ar=0.5, upd=0.25, p2p_f=0.5),
           stage(1, 1.5, 4.0, ar=0.6, upd=0.5, p2p_f=0.5, p2p_b=1.0),
           stage(2, 2.0, 4.5, ar=0.4, upd=0.1, p2p_b=0.5)]
    r = eq7(costs(st_, 4))
    assert r.max_fwd_s == 2.0 and r.max_bwd_s == 5.0  # stage 1: 1.5 + 0.5 P2P; 4.0 + 1.0 P2P
    assert r.pipeline_s == 42.0
    assert r.first_stage_sync_s == 0.5 and r.max_update_s == 0.5
    assert r.paper_tail_s == 1.0
    # stage 0's sync is the most exposed: max(0.5, max(0, 0.6 - 5), max(0, 0.4 - 10)) = 0.5
    assert r.exposed_sync_s == 0.5 and r.tail_s == 1.0
    assert r.iteration_s == 43.0 == r.paper_iteration_s
    assert r.bottleneck_fwd_stage == 1 and r.bottleneck_bwd_stage == 1


def test_late_stage_sync_can_dominate_the_tail():
    # the last stage's all-reduce is longer than the time it has before stage 0 finishes
    st_ = [stage(0, 1.0, 1.0, ar=0.1), stage(1, 1.0, 1.0, ar=3.0, upd=0.2)]
    r = eq7(costs(st_, 2))
    assert r.exposed_sync_s == pytest.approx(3.0 - 1.0)  # stage 1 starts 1 backward slot earlier
    assert r.tail_s == pytest.approx(3.0 - 1.0 + 0.2)
    assert r.paper_tail_s == pytest.approx(0.1 + 0.2)


def test_optimizer_counts_without_data_parallelism():
    # dp = 1: no gradient sync, but the optimizer still runs (the reference drops it)
    r = eq7(costs([stage(0, 1.0, 2.0, upd=0.3)], 4))
    assert r.first_stage_sync_s == 0.0 and r.max_update_s == 0.3
    assert r.iteration_s == pytest.approx(4 * 3.0 + 0.3)


@given(
    pp=st.integers(1, 32), m=st.integers(1, 128),
    f=st.floats(1e-4, 10), b=st.floats(1e-4, 10), ar=st.floats(0, 5), upd=st.floats(0, 5),
)
def test_equal_stages_property(pp, m, f, b, ar, upd):
    r = eq7(costs([stage(s, f, b, ar=ar, upd=upd) for s in range(pp)], m))
    expected = (m + pp - 1) * (f + b) + ar + upd
    assert math.isclose(r.iteration_s, expected, rel_tol=1e-12)
    assert math.isclose(r.paper_iteration_s, expected, rel_tol=1e-12)
