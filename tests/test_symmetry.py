"""Replica symmetry (sim.symmetry): the guard on hand-made layouts, and one simulated replica per
stage giving the full simulation's answer to the bit wherever the guard accepts a layout."""

import dataclasses

import pytest
from analytic_model import Analytic
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

from trainsim.operators import Attention, ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.errors import ConfigError
from trainsim.sim import symmetry
from trainsim.sim.costs import IterationCosts, build_costs
from trainsim.sim.engine import SimOptions, build, collect, run
from trainsim.sim.jitter_config import parse_jitter
from trainsim.sim.routes import build_routes
from trainsim.sim.symmetry import isomorphic_replicas
from trainsim.topology import get_cluster
from trainsim.topology.fabric import FabricKind, FabricSpec

GPT = ModelSpec("gpt-20b", hidden=6144, heads=64, layers=48, seq_len=2048, fwd_mp_syncs=1, bwd_mp_syncs=2)
GPT_FLASH = dataclasses.replace(GPT, attention=Attention.FLASH)  # context parallelism needs it


def make(pp, mp, dp, m, cluster="perlmutter", chunks=1, cp=1, bucket=400_000_000):
    training = TrainingSpec(micro_batch=4, micro_batches=m, dp_bucket=bucket)
    par = Parallelism(pp=pp, mp=mp, dp=dp, cp=cp)
    cl = cluster if not isinstance(cluster, str) else get_cluster(cluster)
    costs = build_costs(build_stage_plans(GPT if cp == 1 else GPT_FLASH, training, par), training, par, cl, Analytic())
    if chunks > 1:
        par = Parallelism(pp=pp, mp=mp, dp=dp, cp=cp, schedule="interleaved-1f1b", virtual_stages=chunks)
        costs = IterationCosts(stages=costs.stages, micro_batches=m, parallelism=par, mp_span=costs.mp_span,
                               dp_span=costs.dp_span, p2p_spans=costs.p2p_spans)
    return costs, cl


def full_run(costs, cluster, **kw):
    """The full simulation, every replica (build, run, collect: whatever simulate() does by default)."""
    ctx = build(costs, cluster, **kw)
    wall = run(ctx)
    return collect(ctx, wall, peak_flops=cluster.gpu.peak_flops)


def reduced(costs, cluster, **kw):
    """simulate() through the representatives: build, reduce, run, expand, collect."""
    ctx = build(costs, cluster, **kw)
    small = symmetry.reduce(ctx)
    wall = run(small)
    return collect(symmetry.expand(small), wall, peak_flops=cluster.gpu.peak_flops), small is not ctx


def answer(r):
    return (r.iteration_s, r.eq7_s, r.pipeline_s, r.bubble_share, dict(r.exposed), dict(r.breakdown), r.critical,
            r.stage_critical, r.dp, r.pp, r.mfu, r.model_flops, r.mode, r.replicas_recorded)


# -- the guard on hand-made layouts --------------------------------------------------------------------

CAP = {f"{t}{i}": 10.0 for t in "abcdz" for i in range(4)}


def test_disjoint_isomorphic_replicas():
    own = [[{"a0": 1.0, "b0": 2.0}, {"b0": 3.0}], [{"a1": 1.0, "b1": 2.0}, {"b1": 3.0}]]
    shared = [{"b0": 4.0, "b1": 4.0, "z0": 1.0}]  # a DP collective: same rate on each replica's copy
    assert isomorphic_replicas(own, shared, CAP)
    assert isomorphic_replicas([], [], CAP)
    assert isomorphic_replicas([[]] * 3, [{"z0": 1.0}], CAP)


@pytest.mark.parametrize("own, shared, why", [
    ([[{"a0": 1.0}], [{"a0": 1.0}]], [], "a link on two replicas' own routes"),
    ([[{"a0": 1.0}], [{"a1": 2.0}]], [], "another rate"),
    ([[{"a0": 1.0}], [{"a1": 1.0}, {"b1": 1.0}]], [], "another number of routes"),
    ([[{"a0": 1.0}], [{"a1": 1.0, "b1": 1.0}]], [], "another route length"),
    ([[{"a0": 1.0}, {"a0": 1.0}], [{"a1": 1.0}, {"b1": 1.0}]], [], "not a function"),
    ([[{"a0": 1.0}, {"b0": 1.0}], [{"a1": 1.0}, {"a1": 1.0}]], [], "not injective"),
    ([[{"a0": 1.0}], [{"a1": 1.0}]], [{"a0": 2.0, "a1": 3.0}], "a collective loads the copies unequally"),
    ([[{"a0": 1.0}], [{"a1": 1.0}]], [{"a0": 2.0}], "a collective on one replica's links only"),
    ([[{"a0": 1.0}], [{"a1": 1.0}]], [{"a0": 2.0, "b1": 2.0}], "a collective on another of its links"),
])
def test_asymmetric_layouts_are_declined(own, shared, why):
    assert not isomorphic_replicas(own, shared, CAP), why


def test_capacity_and_tier_must_match():
    own = [[{"a0": 1.0}], [{"a1": 1.0}]]
    assert not isomorphic_replicas(own, [], {**CAP, "a1": 11.0})
    assert not isomorphic_replicas(own, [], CAP, {"a0": "nic", "a1": "nvlink"})
    assert isomorphic_replicas(own, [], CAP, {"a0": "nic", "a1": "nic"})


def test_shared_nic_layout_runs_in_full():
    # Four GPUs behind one NIC: the P2P sends of several replicas share it, no exact reduction.
    cl = dataclasses.replace(get_cluster("perlmutter"), nics_per_node=1)
    costs, cl = make(2, 1, 4, 4, cl)
    ctx = build(costs, cl)
    routes = build_routes(costs, cl, 1)
    nics = [{e for e in routes.p2p[0, 1, r] if str(e).startswith("nic")} for r in range(4)]
    assert nics[0] and nics[0] == nics[1]
    assert symmetry.plan(ctx) is None and symmetry.reduce(ctx) is ctx


def test_plan_declines_jitter_full_traces_and_other_replicas():
    costs, cl = make(2, 2, 4, 4)
    assert symmetry.plan(build(costs, cl)) == symmetry.Plan(dp=4, representatives=(0,), multiplicity={0: 4})
    assert symmetry.plan(build(costs, cl, mode="ideal")) is not None
    assert symmetry.plan(build(costs, cl, perturb=parse_jitter({"compute": {"sigma": 0.01}}))) is None
    assert symmetry.plan(build(costs, cl, record=True)) is None  # --trace-replicas all
    assert symmetry.plan(build(costs, cl, record={(0, 1)})) is None
    assert symmetry.plan(build(costs, cl, record={(0, 0), (1, 0)})) is not None
    one, cl = make(2, 2, 1, 4)
    assert symmetry.plan(build(one, cl)) is None  # nothing to reduce


# -- the reduced run is the full run, to the bit -----------------------------------------------------------

LAYOUTS = [(4, 4, 8, 8), (2, 2, 4, 6), (1, 4, 8, 1), (4, 1, 4, 8), (2, 2, 2, 5), (2, 8, 4, 4), (1, 1, 8, 1),
           (8, 1, 2, 8), (2, 4, 16, 4), (3, 8, 2, 6)]


@pytest.mark.parametrize("cluster", ["perlmutter", "dgx-h100", "vista", "dgx-a100"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "pp{}-mp{}-dp{}-m{}".format(*t))
def test_reduced_run_is_bit_identical(cluster, layout):
    pp, mp, dp, m = layout
    costs, cl = make(pp, mp, dp, m, cluster)
    for kw in ({}, {"mode": "ideal"}, {"overlap_dp": True}):
        full = full_run(costs, cl, **kw)
        small, used = reduced(costs, cl, **kw)
        assert used
        assert answer(small) == answer(full), kw
        assert small.events < full.events


@pytest.mark.parametrize("case", [
    dict(pp=4, mp=2, dp=4, m=8, chunks=2), dict(pp=2, mp=2, dp=4, m=4, cp=2), dict(pp=2, mp=4, dp=2, m=4, cp=2),
    dict(pp=4, mp=1, dp=8, m=8, chunks=2, cluster="dgx-h100"), dict(pp=2, mp=8, dp=4, m=4, bucket=50_000_000),
    dict(pp=1, mp=2, dp=16, m=2, cluster="vista", bucket=20_000_000),
])
def test_interleaved_cp_and_buckets_bit_identical(case):
    case = dict(case)
    costs, cl = make(case.pop("pp"), case.pop("mp"), case.pop("dp"), case.pop("m"), **case)
    for opts in (None, SimOptions(True, True, True, True, interference=False),
                 SimOptions(True, False, True, True, interference=True), SimOptions(True, True, False, True)):
        full = full_run(costs, cl, options=opts)
        small, used = reduced(costs, cl, options=opts)
        assert used and answer(small) == answer(full), opts


def test_trace_of_the_critical_replicas_is_the_same():
    costs, cl = make(4, 2, 8, 8, "dgx-h100")
    record = {(s, 0) for s in range(4)}
    full = full_run(costs, cl, record=record)
    small, used = reduced(costs, cl, record=record)
    assert used and answer(small) == answer(full)
    assert full.critical[1] == 0 and set(full.stage_critical) == {0}
    assert small.spans == full.spans and len(full.spans) > 0


def test_jitter_keeps_every_replica():
    costs, cl = make(2, 2, 4, 4)
    jit = parse_jitter({"compute": {"sigma": 0.05}})
    ctx = build(costs, cl, perturb=jit, seed=3)
    assert symmetry.reduce(ctx) is ctx and symmetry.expand(ctx) is ctx


@settings(max_examples=30, deadline=None, phases=(Phase.explicit, Phase.generate))
@given(pp=st.sampled_from([1, 2, 4]), mp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([2, 3, 4, 8]),
       m=st.integers(1, 8), cluster=st.sampled_from(["perlmutter", "dgx-h100", "vista", "dgx-a100", "hgx-h200"]),
       overlap=st.booleans(), bucket=st.sampled_from([25_000_000, 400_000_000]))
def test_any_accepted_layout_is_bit_identical(pp, mp, dp, m, cluster, overlap, bucket):
    try:
        costs, cl = make(pp, mp, dp, m, cluster, bucket=bucket)
    except ConfigError:
        assume(False)
    full = full_run(costs, cl, overlap_dp=overlap)
    small, used = reduced(costs, cl, overlap_dp=overlap)
    if used:
        assert answer(small) == answer(full)
    else:
        assert answer(small) == answer(full) and small.events == full.events


# -- a fat-tree fabric (topology.fabric): uplinks shared by replicas ------------------------------------------

def _tree(cluster="perlmutter", **fabric):
    return dataclasses.replace(get_cluster(cluster), fabric=FabricSpec(kind=FabricKind.FAT_TREE, **fabric))


@pytest.mark.parametrize("rail", [False, True])
def test_fabric_with_uplinks_only_under_dp_collectives_reduces_exactly(rail):
    # PP1: a replica's own routes are its MP all-reduces (inside its node); only the DP collectives
    # (one flow over every replica's links, the same in both runs) cross the 4:1 leaf uplinks, which
    # no replica owns: the guard accepts, and the reduced run is the full one.
    costs, cl = make(1, 4, 8, 4, _tree(nodes_per_leaf=2, oversubscription=4.0, rail_optimized=rail))
    routes = build_routes(costs, cl, 1)
    assert any(e.tier.value == "leaf" for e in routes.dp_ar[0, 0])
    flat, flat_cl = make(1, 4, 8, 4)
    for kw in ({}, {"overlap_dp": True}):
        full = full_run(costs, cl, **kw)
        small, used = reduced(costs, cl, **kw)
        assert used and answer(small) == answer(full), kw
        assert small.iteration_s == pytest.approx(full.iteration_s, rel=1e-9, abs=0)
        # ... and the uplinks did slow it: the same layout on a full-bisection fabric is faster.
        assert full_run(flat, flat_cl, **kw).iteration_s < full.iteration_s, kw


@pytest.mark.parametrize("rail", [False, True])
def test_fabric_uplink_on_several_replicas_p2p_runs_in_full(rail):
    # PP2 MP4 DP4 on 8 Perlmutter nodes, 2 per leaf: stage 0 is nodes 0-3, stage 1 nodes 4-7; the P2P
    # sends of replicas 0 and 1 (nodes 0, 1 -> 4, 5) both cross leaf 0's uplink (or its rails'):
    # a link on two replicas' own routes, so the guard declines and the run is the full one.
    costs, cl = make(2, 4, 4, 4, _tree(nodes_per_leaf=2, oversubscription=2.0, rail_optimized=rail))
    ctx = build(costs, cl)
    routes = build_routes(costs, cl, 1)
    ups = [{e for e in routes.p2p[0, 1, r] if e.tier.value == "leaf"} for r in range(4)]
    assert ups[0] and ups[0] & ups[1]
    assert symmetry.plan(ctx) is None and symmetry.reduce(ctx) is ctx
    full = full_run(costs, cl)
    small, used = reduced(costs, cl)
    assert not used and answer(small) == answer(full)
