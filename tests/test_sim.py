"""The simulation: golden timelines, Eq. 7 as the ideal special case, contention, hooks, outputs."""

import dataclasses
import json

import pytest
from analytic_model import Analytic
from hypothesis import given, settings
from hypothesis import strategies as st

from trainsim.operators import ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.errors import ConfigError
from trainsim.scenarios.plots import plot_breakdown, plot_timeline
from trainsim.scenarios.trace import write_chrome_trace
from trainsim.sim.compare import CAUSES, compare
from trainsim.sim.costs import IterationCosts, StageCost, build_costs
from trainsim.sim.engine import SimOptions, simulate
from trainsim.sim.eq7 import eq7
from trainsim.topology import ClusterSpec, get_cluster, get_gpu


def stage(i, f, b, *, rec=0.0, mpf=0.0, mpb=0.0, p2pf=0.0, p2pb=0.0, buckets=(), ag=0.0, opt=0.0):
    return StageCost(index=i, fwd_compute_s=f, bwd_compute_s=b, recompute_s=rec, mp_fwd_s=mpf, mp_bwd_s=mpb,
                     mp_allreduce_s=mpf, mp_fwd_count=1 if mpf else 0, mp_bwd_count=1 if mpb else 0,
                     p2p_fwd_s=p2pf, p2p_bwd_s=p2pb, dp_bucket_s=tuple(buckets), dp_allgather_s=ag,
                     optimizer_s=opt, params=1000, fwd_flops=1e12, bwd_flops=2e12)


def costs_of(stages, m, pp=None, mp=1, dp=1):
    par = Parallelism(pp=pp or len(stages), mp=mp, dp=dp)
    return IterationCosts(stages=tuple(stages), micro_batches=m, parallelism=par, mp_span=(1, mp),
                          dp_span=(1, dp), p2p_spans=())


def log(result, cats=("forward", "backward")):
    return sorted((int(s.track.split()[1]), s.name, s.start_s, s.end_s) for s in result.spans if s.cat in cats)


# -- golden timelines ---------------------------------------------------------------------------------

def test_golden_1f1b_pp2_m2():
    c = costs_of([stage(0, 1.0, 2.0), stage(1, 1.0, 2.0)], m=2)
    r = simulate(c, None, mode="ideal", record=True)
    assert log(r) == [
        (0, "B0", 4.0, 6.0), (0, "B1", 7.0, 9.0), (0, "F0", 0.0, 1.0), (0, "F1", 1.0, 2.0),
        (1, "B0", 2.0, 4.0), (1, "B1", 5.0, 7.0), (1, "F0", 1.0, 2.0), (1, "F1", 4.0, 5.0),
    ]
    assert r.iteration_s == 9.0 == r.eq7_s
    assert r.bubble_share == pytest.approx(1 / 3)  # (pp-1)/(m+pp-1)
    assert r.pipeline_s == 9.0


def test_golden_p2p_rendezvous():
    # Megatron's blocking P2P: stage 0's send of F1 can start only when stage 1 posts the
    # matching receive, which it does (batched with its send of B0's gradient) after B0.
    c = costs_of([stage(0, 1.0, 2.0, p2pf=0.5), stage(1, 1.0, 2.0, p2pb=0.5)], m=2)
    no_links = SimOptions(own_stage_times=True, p2p_transfers=True, bucketed_dp=False, contention=False)
    r = simulate(c, None, options=no_links, record=True)
    assert log(r, ("forward", "backward", "pp", "pp_wait")) == [
        (0, "B0", 5.0, 7.0), (0, "B1", 8.5, 10.5), (0, "F0", 0.0, 1.0), (0, "F1", 1.5, 2.5),
        (0, "P2P F0", 1.0, 1.5), (0, "P2P F1", 4.5, 5.0), (0, "P2P wait F1", 2.5, 4.5),
        (1, "B0", 2.5, 4.5), (1, "B1", 6.0, 8.0), (1, "F0", 1.5, 2.5), (1, "F1", 5.0, 6.0),
        (1, "P2P B0", 4.5, 5.0), (1, "P2P B1", 8.0, 8.5),
    ]
    assert r.iteration_s == 10.5 and r.eq7_s == 12.0  # (m - 1 + pp)(1.5 + 2.5)
    assert r.exposed["pp"] == pytest.approx(0.5 + 2.0 + 0.5)  # stage 0: two sends and the wait
    # busy: 6 s compute + 1 s of sends on each stage; the 2 s wait is bubble: 1 - 14 / (2 * 10.5)
    assert r.bubble_share == pytest.approx(1 / 3)


def _two_node_cluster():
    # 2 GPUs per node sharing one NIC: the two replicas' P2P sends collide on it.
    return ClusterSpec(name="t", gpu=get_gpu("h100-sxm"), gpus_per_node=2, max_nodes=None,
                       nvlink_bw=1e11, nic_bw=1e10, nics_per_node=1)


def _contention_costs():
    return costs_of([stage(0, 1.0, 2.0, p2pf=0.5, buckets=(0.3,), ag=0.2, opt=0.1),
                     stage(1, 1.0, 2.0, p2pb=0.5, buckets=(0.3,), ag=0.2, opt=0.1)], m=1, dp=2)


def test_golden_contention():
    # Both replicas send at once over the shared NIC of each node: each P2P takes 2 x 0.5 s.
    c = _contention_costs()
    r = simulate(c, _two_node_cluster(), record=True)
    got = sorted((s.track, s.cat, s.start_s, s.end_s) for s in r.spans if s.cat in ("forward", "backward", "pp"))
    want = []
    for rep in (0, 1):
        want += [(f"stage 0 replica {rep}", "forward", 0.0, 1.0), (f"stage 0 replica {rep}", "pp", 1.0, 2.0),
                 (f"stage 1 replica {rep}", "forward", 2.0, 3.0), (f"stage 1 replica {rep}", "backward", 3.0, 5.0),
                 (f"stage 1 replica {rep}", "pp", 5.0, 6.0), (f"stage 0 replica {rep}", "backward", 6.0, 8.0)]
    assert len(got) == len(want)
    for g, w in zip(got, sorted(want), strict=True):
        assert g[:2] == w[:2] and g[2] == pytest.approx(w[2]) and g[3] == pytest.approx(w[3])
    # Tail: stage 0's all-reduce [8, 8.3] on NVLink, optimizer 0.1, all-gather 0.2 -> 8.6.
    assert r.iteration_s == pytest.approx(8.6)
    assert r.eq7_s == pytest.approx(8.6)  # 2 * (1.5 + 2.5) + 0.3 + 0.3
    assert r.critical == (0, 0)
    assert r.exposed["pp"] == pytest.approx(1.0)  # stage 0 sends once (its forward), contended: 1 s
    # The shared NIC is busy for both sends.
    nic = sorted((s.start_s, s.end_s) for s in r.spans if s.track == "nic:0.0")
    assert nic == [pytest.approx((1.0, 2.0)), pytest.approx((5.0, 6.0))]
    # Without contention the same case is 1 s faster per send pair.
    a = compare(c, _two_node_cluster())
    assert a.attribution["link_contention"] == pytest.approx(1.0)
    assert a.attribution["unequal_stages"] == pytest.approx(-1.0)


# -- Eq. 7 as the ideal special case ------------------------------------------------------------------

durations = st.one_of(st.just(0.0), st.floats(1e-4, 1.0), st.floats(1.0, 100.0))


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(1, 32), m=st.integers(1, 128), data=st.data())
def test_ideal_equals_eq7(pp, m, data):
    stages = []
    for i in range(pp):
        stages.append(stage(
            i, data.draw(durations), data.draw(durations), mpf=data.draw(durations), mpb=data.draw(durations),
            p2pf=data.draw(durations) if i < pp - 1 else 0.0, p2pb=data.draw(durations) if i else 0.0,
            buckets=data.draw(st.lists(durations, max_size=3)), ag=data.draw(durations), opt=data.draw(durations)))
    c = costs_of(stages, m)
    want = eq7(c).iteration_s
    got = simulate(c, None, mode="ideal").iteration_s
    if want == 0:
        assert got == 0
    else:
        assert abs(got - want) / want <= 1e-9


def test_ideal_with_replicas_and_unequal_tail():
    # Stage 1's all-reduce (5) outlasts its head start (B = 2): the tail is max(0, 5 - 2) + 1 = 4.
    c = costs_of([stage(0, 1.0, 2.0, buckets=(0.5,), opt=1.0), stage(1, 1.0, 2.0, buckets=(5.0,), opt=1.0)],
                 m=3, dp=3)
    r = simulate(c, None, mode="ideal")
    assert r.iteration_s == pytest.approx(4 * 3.0 + 4.0) == pytest.approx(eq7(c).iteration_s)


def test_golden_host_ahead_pipeline():
    # A pipeline stage whose host issues its schedule ahead (the pipelining runtime): 2 s of host per
    # forward and per backward, GPU 1 s and 2 s. Each host issues its own order on its own clock (stage
    # 0: F0 F1 B0 B1 at 0, 2, 4, 6; stage 1: F0 B0 F1 B1), and a GPU step starts no earlier than its
    # issue starts and ends no earlier than it is done: stage 0's forwards wait out 1 s each, and
    # stage 1's F1 starts at 5 (its B0's end), the host done with it at 6. No host fill or drain: 10 s,
    # where the per-step excess (Eq. 7, and the ideal mode) charges (m + p - 1) slots of 2 + 2 s.
    def ahead(i):
        return dataclasses.replace(stage(i, 1.0, 2.0), host_fwd_s=2.0, host_bwd_s=2.0, host_fwd_extra_s=1.0,
                                   host_ahead=True)
    c = costs_of([ahead(0), ahead(1)], m=2)
    no_links = SimOptions(own_stage_times=True, p2p_transfers=False, bucketed_dp=False, contention=False)
    r = simulate(c, None, options=no_links, record=True)
    assert log(r, ("forward", "backward", "host")) == [
        (0, "B0", 5.0, 7.0), (0, "B1", 8.0, 10.0), (0, "F0", 0.0, 1.0), (0, "F1", 2.0, 3.0),
        (0, "host F0", 1.0, 2.0), (0, "host F1", 3.0, 4.0),
        (1, "B0", 3.0, 5.0), (1, "B1", 6.0, 8.0), (1, "F0", 2.0, 3.0), (1, "F1", 5.0, 6.0),
    ]
    assert r.iteration_s == 10.0
    assert r.eq7_s == 12.0 == simulate(c, None, mode="ideal").iteration_s
    assert r.breakdown["host"] == pytest.approx(2.0)  # stage 0 (critical: it drains last) waited 2 s on its host
    # compare names the host clock as its own cause: the 2 s it saves over Eq. 7's per-step excess
    a = compare(c, _two_node_cluster())
    assert a.attribution["unequal_stages"] == pytest.approx(0.0, abs=1e-12)
    assert a.attribution["host_ahead"] == pytest.approx(-2.0)
    assert sum(a.attribution.values()) == pytest.approx(a.sim_s - a.eq7_s)


def test_ideal_breakdown_splits_the_slot_into_its_parts():
    # Eq. 7's slot is the slowest stage's forward (1 + MP 0.5 + host 0.25) and backward (2 + 1 + 0.5); every
    # stage runs it, and the breakdown says what it is made of: stage 0 (critical: it drains last) runs two
    # of each, 10.5 s busy, and waits out the other 5.25 s of (m + p - 1) * 5.25 s.
    slow = dataclasses.replace(stage(0, 1.0, 2.0, mpf=0.5, mpb=1.0), host_fwd_extra_s=0.25, host_bwd_extra_s=0.5)
    c = costs_of([slow, stage(1, 0.5, 1.0)], m=2)
    r = simulate(c, None, mode="ideal")
    assert r.iteration_s == pytest.approx(3 * 5.25) == pytest.approx(eq7(c).iteration_s)
    got = {k: v for k, v in r.breakdown.items() if v}
    assert got == pytest.approx({"compute": 6.0, "mp": 3.0, "host": 1.5, "idle": 5.25})


# -- determinism, hooks, errors -------------------------------------------------------------------------

class Jitter:
    def __init__(self):
        self.calls = 0

    def compute_factor(self, stage, replica, rng):
        self.calls += 1
        return float(rng.lognormal(0.0, 0.1))

    def comm_factor(self, kind, tier, rng):
        assert tier in ("nvlink", "nic") and kind in ("mp", "pp", "dp_allreduce", "dp_allgather")
        return float(rng.uniform(1.0, 2.0))

    def processes(self, env, network, rng):
        def halve():
            yield env.timeout(0.5)
            network.set_capacity("nic:0.0", 5e9)
        return [halve()]


def test_perturb_hook_and_determinism():
    c, cl = _contention_costs(), _two_node_cluster()
    base = simulate(c, cl).iteration_s
    j = Jitter()
    a = simulate(c, cl, seed=7, perturb=j)
    b = simulate(c, cl, seed=7, perturb=Jitter())
    other = simulate(c, cl, seed=8, perturb=Jitter())
    assert j.calls > 0
    assert a.iteration_s == b.iteration_s and a.exposed == b.exposed
    assert a.iteration_s != other.iteration_s
    assert a.iteration_s != base
    with pytest.raises(ConfigError):
        simulate(c, cl, mode="ideal", perturb=Jitter())
    with pytest.raises(ConfigError):
        simulate(c, cl, mode="fast")


# -- realistic runs on real stage plans -------------------------------------------------------------------



@pytest.fixture(scope="module")
def gpt20b_448():
    model = ModelSpec("gpt-20b", hidden=6144, heads=64, layers=44, seq_len=2048, fwd_mp_syncs=1, bwd_mp_syncs=2)
    training = TrainingSpec(micro_batch=4, micro_batches=16, dp_bucket=400_000_000)
    par = Parallelism(pp=4, mp=4, dp=8)
    cluster = get_cluster("perlmutter")
    costs = build_costs(build_stage_plans(model, training, par), training, par, cluster, Analytic())
    return costs, cluster


def test_realistic_paper_layout(gpt20b_448):
    costs, cluster = gpt20b_448
    r = simulate(costs, cluster, record=True, tokens_per_iteration=4 * 2048 * 16 * 8)
    ideal = simulate(costs, cluster, mode="ideal")
    assert ideal.iteration_s == pytest.approx(r.eq7_s, rel=1e-9)
    assert r.iteration_s > 0 and r.events > 1000
    assert 0 < r.mfu < 1 and r.tokens_per_s == pytest.approx(4 * 2048 * 16 * 8 / r.iteration_s)
    assert 0 < r.bubble_share < 1
    # every stage starts its update at the gradient-norm barrier: the slowest update finishes last
    slowest = max(costs.stages, key=lambda st: (st.optimizer_s + st.dp_allgather_s, -st.index))
    assert r.critical[0] == slowest.index
    assert sum(r.breakdown.values()) == pytest.approx(r.iteration_s)
    assert all(v >= 0 for v in r.exposed.values()) and r.exposed["mp"] > 0
    assert any(s.cat == "link" for s in r.spans) and any(s.cat == "dp_allreduce" for s in r.spans)
    again = simulate(costs, cluster, record=True, tokens_per_iteration=4 * 2048 * 16 * 8)
    assert again.iteration_s == r.iteration_s and again.spans == r.spans


def test_compare_attribution_sums(gpt20b_448):
    costs, cluster = gpt20b_448
    c = compare(costs, cluster)
    assert set(c.attribution) == set(CAUSES)
    assert sum(c.attribution.values()) == pytest.approx(c.sim_s - c.eq7_s, abs=1e-12)
    assert c.sim_s == simulate(costs, cluster).iteration_s
    assert c.attribution["unequal_stages"] < 0  # first and last stages are lighter than the middle ones
    assert c.attribution["link_contention"] >= 0
    ideal = compare(costs, cluster, ideal=True)
    assert all(abs(v) <= 1e-9 * ideal.eq7_s for v in ideal.attribution.values())
    assert abs(ideal.rel_diff) <= 1e-9
    json.dumps(c.to_json())


def test_gpipe_and_interleaved_run(gpt20b_448):
    costs, cluster = gpt20b_448
    g = simulate(costs, cluster, schedule="gpipe", mode="ideal")
    one = simulate(costs, cluster, mode="ideal")
    assert g.iteration_s == pytest.approx(one.iteration_s)  # same makespan for equal stages, more memory
    par = Parallelism(pp=4, mp=4, dp=8, schedule="interleaved-1f1b", virtual_stages=2)
    inter = IterationCosts(stages=costs.stages, micro_batches=16, parallelism=par, mp_span=costs.mp_span,
                           dp_span=costs.dp_span, p2p_spans=costs.p2p_spans)
    r = simulate(inter, cluster)
    assert r.iteration_s < simulate(costs, cluster).iteration_s  # smaller bubble
    bad = IterationCosts(stages=costs.stages, micro_batches=6, parallelism=par, mp_span=costs.mp_span,
                         dp_span=costs.dp_span, p2p_spans=costs.p2p_spans)
    with pytest.raises(ConfigError):
        simulate(bad, cluster)


# -- outputs --------------------------------------------------------------------------------------------

def test_chrome_trace(tmp_path, gpt20b_448):
    costs, cluster = gpt20b_448
    r = simulate(costs, cluster, record=True)
    p = write_chrome_trace(r, tmp_path / "t.json")
    doc = json.loads(p.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(r.spans) and all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    named = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in xs} <= named
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {
        "stages", "collectives", "links"}


def test_plots(tmp_path, gpt20b_448):
    costs, cluster = gpt20b_448
    r = simulate(costs, cluster, record=True)
    for p in (plot_timeline(r, tmp_path / "tl.png"), plot_breakdown(r.breakdown, tmp_path / "bd.png")):
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(ValueError):
        plot_timeline(simulate(costs, cluster), tmp_path / "x.png")


def test_compare_with_the_interleaved_closed_form(gpt20b_448):
    costs, cluster = gpt20b_448
    par = Parallelism(pp=4, mp=4, dp=8, schedule="interleaved-1f1b", virtual_stages=2)
    inter = IterationCosts(stages=costs.stages, micro_batches=16, parallelism=par, mp_span=costs.mp_span,
                           dp_span=costs.dp_span, p2p_spans=costs.p2p_spans)
    c = compare(inter, cluster)
    assert abs(c.attribution["residual"]) < 1e-9 * c.eq7_s  # Eq. 7 has interleaving's closed form
    assert eq7(inter).pipeline_s < eq7(costs).pipeline_s  # interleaving shrinks the bubble
    assert sum(c.attribution.values()) == pytest.approx(c.sim_s - c.eq7_s, abs=1e-9)
