"""The simulation's structure: build / run / collect, typed vocabularies, bounded recording,
per-run random streams, the resource estimate."""

import json
import pickle

import numpy as np
import pytest
from analytic_model import Analytic

import trainsim.sim.jitter as jitter_module
from trainsim.operators import ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.errors import ConfigError
from trainsim.sim import processes
from trainsim.sim.costs import IterationCosts, build_costs, mfu, model_flops
from trainsim.sim.engine import EXPOSED_KINDS, SimMode, TrafficKind, build, collect, simulate
from trainsim.sim.jitter import RunJitter
from trainsim.sim.jitter_config import parse_jitter
from trainsim.sim.record import SpanLog
from trainsim.sim.schedule import StepKind, one_f_one_b
from trainsim.topology import LinkId, LinkModel, LinkTier, Placement, build_graph, get_cluster

GPT20B = ModelSpec("gpt-20b", hidden=6144, heads=64, layers=44, seq_len=2048, fwd_mp_syncs=1, bwd_mp_syncs=2)


def make(pp, mp, dp, m, cluster="perlmutter", chunks=1, bucket=400_000_000):
    training = TrainingSpec(micro_batch=4, micro_batches=m, dp_bucket=bucket)
    par = Parallelism(pp=pp, mp=mp, dp=dp)
    cl = get_cluster(cluster)
    costs = build_costs(build_stage_plans(GPT20B, training, par), training, par, cl, Analytic())
    if chunks > 1:
        par = Parallelism(pp=pp, mp=mp, dp=dp, schedule="interleaved-1f1b", virtual_stages=chunks)
        costs = IterationCosts(stages=costs.stages, micro_batches=m, parallelism=par, mp_span=costs.mp_span,
                               dp_span=costs.dp_span, p2p_spans=costs.p2p_spans)
    return costs, cl


@pytest.fixture(scope="module")
def layout():
    return make(4, 4, 8, 8)


NOISY = {"noise": {"nic": {"sigma": 0.3}, "nvlink": {"sigma": 0.05, "kinds": {"mp": 0.1}}},
         "congestion": {"nic": {"bandwidth_factor": 0.3, "mean_on_s": 0.05, "mean_off_s": 0.2}},
         "compute": {"sigma": 0.02, "stragglers": {"probability": 0.2, "slowdown": 1.2}}}


# -- typed vocabularies ------------------------------------------------------------------------------

def test_enums_are_their_strings(layout):
    costs, cl = layout
    r = simulate(costs, cl, mode="realistic")
    assert r.mode == "realistic" and r.mode is SimMode.REALISTIC and f"{r.mode}" == str(r.mode) == "realistic"
    assert simulate(costs, cl, mode=SimMode.IDEAL).mode == "ideal"
    assert list(r.exposed) == list(EXPOSED_KINDS) == ["mp", "cp", "pp", "dp_allreduce", "dp_allgather"]
    assert r.exposed["mp"] == r.exposed[TrafficKind.MP] and r.breakdown["dp_allgather"] >= 0
    doc = json.loads(json.dumps({"mode": r.mode, "exposed": r.exposed, "breakdown": r.breakdown}))
    assert doc["mode"] == "realistic" and set(doc["exposed"]) == {"mp", "cp", "pp", "dp_allreduce", "dp_allgather"}
    assert set(r.components()) >= {"exposed_mp_s", "exposed_dp_allgather_s"}
    steps = one_f_one_b(2, 2, 0)
    assert all(isinstance(s.kind, StepKind) for s in steps) and [f"{s.kind}{s.micro}" for s in steps] == [
        "F0", "F1", "B0", "B1"]
    with pytest.raises(ConfigError):
        simulate(costs, cl, mode="fast")


def test_link_ids_are_typed_and_keep_their_text():
    cl = get_cluster("dgx-h100")
    lm = LinkModel(cl, Placement(Parallelism(pp=2, mp=8, dp=1), 8))
    ids = list(lm.capacities)
    assert all(isinstance(e, LinkId) for e in ids)
    nv = next(e for e in ids if e.tier is LinkTier.NVLINK and e.gpu == 9)
    assert (str(nv), nv.node, nv.number, nv.nic_index) == ("nvlink:9", 1, 9, None)
    nic = next(e for e in ids if e == "nic:1.3")
    assert (nic.tier, nic.node, nic.nic_index, nic.gpu) == (LinkTier.NIC, 1, 3, None)
    assert lm.capacities["nic:1.3"] == lm.capacities[nic] and hash(nic) == hash("nic:1.3")
    assert pickle.loads(pickle.dumps(nic)).tier is LinkTier.NIC
    with pytest.raises(AttributeError):
        nic.node = 2  # immutable
    assert LinkId.parse("nic:1.3") == nic and LinkId.parse("nic:1.3").node == 1
    with pytest.raises(KeyError):
        LinkId.parse("pcie:0")
    assert lm.rank_links(9) == (nv, LinkId.nic(1, 1))
    g = build_graph(cl, 2)
    assert all(isinstance(d["link"], LinkId) and d["tier"] is d["link"].tier for _, _, d in g.edges(data=True))


# -- build / run / collect -------------------------------------------------------------------------------

def test_build_run_collect_is_simulate(layout):
    costs, cl = layout
    ctx = build(costs, cl)
    assert len(ctx.tallies) == 32 and ctx.routes is not None and ctx.env.now == 0
    processes.start(ctx)
    ctx.env.run(until=ctx.finished.event)
    r = collect(ctx, 0.0)
    ref = simulate(costs, cl)  # one replica per stage where symmetric (sim.symmetry): fewer events, same answer
    assert (r.iteration_s, r.exposed, r.critical) == (ref.iteration_s, ref.exposed, ref.critical)
    assert ref.events <= r.events


def test_stage_critical(layout):
    costs, cl = layout
    r = simulate(costs, cl, perturb=parse_jitter(NOISY), seed=3)
    assert len(r.stage_critical) == costs.pp and all(0 <= x < 8 for x in r.stage_critical)
    s, rep = r.critical
    assert r.stage_critical[s] == rep
    # Every stage's critical replica ends no earlier than the others of its stage: its last span ends last.
    full = simulate(costs, cl, perturb=parse_jitter(NOISY), seed=3, record=True)
    ends: dict[tuple[int, int], float] = {}
    for sp in full.spans:
        if " replica " in sp.track:
            _, st, _, rp = sp.track.split()
            ends[int(st), int(rp)] = max(ends.get((int(st), int(rp)), 0.0), sp.end_s)
    for st, rp in enumerate(full.stage_critical):
        assert ends[st, rp] == max(ends[st, x] for x in range(8))


# -- bounded recording -------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [1, 2])
def test_record_subset_keeps_exactly_those_tracks(chunks):
    costs, cl = make(4, 4, 8, 8, chunks=chunks)
    plain = simulate(costs, cl)
    everything = simulate(costs, cl, record=True)
    keep = {(s, r) for s, r in enumerate(plain.stage_critical)} | {(1, 5)}
    part = simulate(costs, cl, record=keep)
    assert part.iteration_s == plain.iteration_s == everything.iteration_s
    # recording a replica other than 0 runs every replica (sim.symmetry); the plain run may run one
    assert part.events >= plain.events and part.exposed == plain.exposed
    assert plain.replicas_recorded == 0 and len(plain.spans) == 0
    assert everything.replicas_recorded == 32 and part.replicas_recorded == len(keep)
    replica_tracks = {f"stage {s} replica {r}" for s, r in keep}
    dp_tracks = {f"stage {s} DP collectives" for s, _ in keep}
    tracks = {sp.track for sp in part.spans}
    links = {sp.track for sp in part.spans if sp.cat == "link"}
    assert tracks - links == replica_tracks | dp_tracks
    # the links are those of the kept replicas' own transfers
    ctx = build(costs, cl)
    own = set().union(*(ctx.routes.replica_links(s, r) for s, r in keep))
    assert links and links <= own
    # every kept span is the one the full recording has
    kept = [sp for sp in everything.spans if sp.track in tracks]
    assert sorted(map(_key, part.spans)) == sorted(map(_key, kept))


def _key(sp):
    return sp.track, sp.name, sp.cat, sp.start_s, sp.end_s, tuple(sorted(sp.args.items()))


def test_record_argument_is_checked(layout):
    costs, cl = layout
    with pytest.raises(ConfigError):
        simulate(costs, cl, record={(4, 0)})
    with pytest.raises(ConfigError):
        simulate(costs, cl, record=[1, 2])
    assert len(simulate(costs, cl, record=set()).spans) == 0


def test_span_log_is_compact_and_a_sequence(layout):
    costs, cl = layout
    r = simulate(costs, cl, record=True)
    log = r.spans
    assert isinstance(log, SpanLog) and len(log) > 1000
    assert log.nbytes() <= 40 * len(log)
    first = log[0]
    assert log[-1] == list(log)[-1] and log[:1] == (first,) and first.end_s > first.start_s
    assert log == list(log) and log == simulate(costs, cl, record=True).spans
    assert {sp.cat for sp in log} >= {"forward", "backward", "mp", "pp", "dp_allreduce", "link"}


# -- per-run random streams ------------------------------------------------------------------------------

def test_no_module_level_run_state():
    assert not any(name in vars(jitter_module) for name in ("_RUNS", "_run_state", "_RunState"))
    j = parse_jitter(NOISY)
    a, b = j.bind(np.random.default_rng(1)), j.bind(np.random.default_rng(1))
    assert isinstance(a, RunJitter) and a.streams is not b.streams
    assert [a.comm_factor("pp", "nic") for _ in range(5)] == [b.comm_factor("pp", "nic") for _ in range(5)]
    assert a.compute_factor(0, 1) == b.compute_factor(0, 1)


def test_interleaved_runs_equal_runs_alone():
    """Many runs stepped in turn (more than the old 64-entry cache held) give what each gives alone."""
    costs, cl = make(2, 4, 2, 4)
    j = parse_jitter(NOISY)
    seeds = list(range(70))
    ctxs = [build(costs, cl, seed=s, perturb=j) for s in seeds]
    for ctx in ctxs:
        processes.start(ctx)
    active = list(ctxs)
    while active:
        for ctx in list(active):
            if ctx.finished.event.triggered:
                active.remove(ctx)
            else:
                ctx.env.step()
    for ctx in ctxs:  # process the last event as simulate() does (SimPy counts its stop as an event)
        ctx.env.run(until=ctx.finished.event)
    together = [collect(ctx, 0.0) for ctx in ctxs]
    for s in (0, 1, 37, 69):
        alone = simulate(costs, cl, seed=s, perturb=j)
        assert (together[s].iteration_s, together[s].exposed, together[s].events) == (
            alone.iteration_s, alone.exposed, alone.events)
    assert len({r.iteration_s for r in together}) > 60  # the seeds do differ


# -- MFU and the resource estimate ---------------------------------------------------------------------------

def test_one_mfu(layout):
    costs, cl = layout
    r = simulate(costs, cl)
    par = costs.parallelism
    f = model_flops(costs, costs.micro_batches, par.mp, par.dp)
    assert r.model_flops == f and r.mfu == mfu(f, r.iteration_s, par.gpus, cl.gpu.peak_flops)
    assert mfu(f, 0.0, 8, 1e15) is None and mfu(f, 1.0, 8, None) is None
