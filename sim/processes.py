"""The SimPy processes of a run: one per (stage, DP replica), two per stage for its DP collectives.

Each is a generator taking ``env`` first and the run's :class:`sim.build.Build` (``ctx``),
which it only reads (apart from its own tally). A stage replica walks its stage's schedule
(:mod:`sim.schedule`): for each step it waits for its input (posting the receive first), computes with
the step's MP all-reduces (:func:`compute_step`), posts the next receive early where Megatron
batches it (:func:`post_next_receive`) and sends its output (:func:`p2p_transfer`); then it syncs
its gradients (:func:`gradient_sync`) and runs its update (:func:`update`). The behaviour is
described in :mod:`sim.engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from trainsim.sim.build import Build, MessageKey, StageSync, StepCost, StepTable, Tally
from trainsim.sim.kinds import TrafficKind
from trainsim.sim.routes import Rates, TierKey
from trainsim.sim.schedule import Step, StepKind
from trainsim.topology.links import LinkTier

Process = Generator[simpy.Event, Any, None]

MP, CP, PP = TrafficKind.MP, TrafficKind.CP, TrafficKind.PP
DP_AR, DP_AG = TrafficKind.DP_ALLREDUCE, TrafficKind.DP_ALLGATHER


def start(ctx: Build) -> None:
    """Start every process of a run, in the order that fixes the order of simultaneous events."""
    env = ctx.env
    for s in ctx.dp_sync:
        env.process(dp_allreduce_process(env, ctx, s))
        env.process(dp_allgather_process(env, ctx, s))
    for s in range(ctx.pp):
        for r in range(ctx.dp):
            env.process(stage_process(env, ctx, s, r, ctx.steps[s]))
    if ctx.perturb is not None:
        for proc in ctx.perturb.processes(env, ctx.net):
            env.process(proc)


# -- helpers ---------------------------------------------------------------------------------------

def meet(env: simpy.Environment, box: dict[MessageKey, simpy.Event], key: MessageKey) -> simpy.Event:
    """The event two parties share for ``key``: the first to ask creates it, the second takes it out
    of ``box``. Every key is touched exactly twice, so the boxes stay small."""
    ev = box.pop(key, None)
    if ev is None:
        ev = box[key] = env.event()
    return ev


@dataclass(frozen=True, slots=True)
class Way:
    """A transfer's way through the network, looked up once: its nominal rate per link (None: not on
    the link model), the busiest link's rate and the tier whose noise it takes."""

    rates: Rates | None
    peak: float  # bytes/s through the busiest link (0: no links)
    tier: LinkTier


def way_of(ctx: Build, rates: Rates | None, kind: TrafficKind, key: TierKey) -> Way:
    """The :class:`Way` of ``rates`` for traffic ``kind`` keyed ``key`` (see :meth:`sim.routes.Routes.tier`)."""
    routes = ctx.routes
    tier = routes.tiers.get((kind, key), LinkTier.NIC) if routes is not None else LinkTier.NIC
    return Way(rates, max(rates.values()) if rates else 0.0, tier)


def comm(ctx: Build, base_s: float, way: Way, kind: TrafficKind, steps: float = 0.0) -> simpy.Event:
    """A transfer of ``base_s`` seconds alone along ``way``: jittered (as its tier; its noise averages
    over the messages of its busiest link, whose bytes are that link's nominal rate times ``base_s``;
    a congestion episode on that tier adds its latency to each of the transfer's ``steps`` sequential
    protocol steps), and shared on its links with contention."""
    perturb = ctx.perturb
    if perturb is not None:
        base_s *= perturb.comm_factor(kind, way.tier, way.peak * base_s)
        if steps and ctx.step_latency:
            base_s += steps * ctx.step_latency.get(way.tier, 0.0)
    rates = way.rates
    if rates and ctx.opts.contention:
        return ctx.net.transfer_rates(base_s, rates, kind, sole_waiter=True)
    return ctx.env.timeout(base_s)


@dataclass(frozen=True, slots=True)
class Lane:
    """What a stage replica's process looks up once: its table, tally, track and routes."""

    stage: int
    replica: int
    table: StepTable
    tally: Tally
    track: int | None  # recorder track code; None: not recorded
    mp: Way
    cp: Way
    fsdp: Way  # FSDP2's in-step gathers and reduce-scatters (off the link model)
    p2p: dict[int, Way]  # destination stage -> the way there (filled on first send)
    compute_factor: Callable[[int, int], float] | None  # the run's perturbation's; None: unperturbed
    rendezvous: bool  # P2P sends wait for the posted receive (see Build.rendezvous)
    bucketed: bool  # its stage's gradients go through the bucketed DP collective
    n_buckets: int
    releases: tuple[tuple[float, int], ...]  # see _releases

    def factor(self) -> float:
        f = self.compute_factor
        return 1.0 if f is None else f(self.stage, self.replica)

    def span(self, ctx: Build, name: str, cat: str, start_s: float, end_s: float) -> None:
        if self.track is not None and ctx.recorder is not None:
            ctx.recorder.span(self.track, name, cat, start_s, end_s)


def _lane(ctx: Build, s: int, r: int) -> Lane:
    st = ctx.costs.stages[s]
    bucketed = ctx.opts.bucketed_dp and ctx.syncs_gradients and bool(st.dp_bucket_s)
    return Lane(stage=s, replica=r, table=ctx.tables[s], tally=ctx.tallies[s, r],
                track=ctx.recorder.replica(s, r) if ctx.recorder is not None else None,
                mp=way_of(ctx, ctx.routes.mp.get((s, r)) if ctx.routes else None, MP, s),
                cp=way_of(ctx, ctx.routes.cp.get((s, r)) if ctx.routes else None, CP, s),
                fsdp=way_of(ctx, None, DP_AG, s), p2p={},
                compute_factor=ctx.perturb.compute_factor if ctx.perturb is not None else None,
                rendezvous=ctx.rendezvous,
                bucketed=bucketed, n_buckets=len(st.dp_bucket_s) if bucketed else 0,
                releases=_releases(st.dp_bucket_ready, len(st.dp_bucket_s), ctx.opts.overlap_dp) if bucketed
                else ((1.0, 0),))


# -- the stage replica -------------------------------------------------------------------------------

def stage_process(env: simpy.Environment, ctx: Build, stage: int, replica: int, steps: tuple[Step, ...]) -> Process:
    """One stage replica (its MP ranks in lock-step): the schedule, the gradient sync, the update."""
    lane = _lane(ctx, stage, replica)
    table, rendezvous, posted, mailbox = lane.table, lane.rendezvous, ctx.posted, ctx.mailbox
    last = len(steps) - 1
    posted_ahead = False  # this step's receive was posted with the previous step's send
    issued = env.now  # the host clock of a stage that issues its schedule ahead (StepCost.issue_s)
    for i, step in enumerate(steps):
        sc = table[step.kind, step.chunk]
        if sc.needs_input:
            # Post this step's receive (unless posted with the last send) and wait for the message.
            key = (stage, replica, step.kind, step.micro, step.chunk)
            if rendezvous and not posted_ahead:
                meet(env, posted, key).succeed()
            yield meet(env, mailbox, key)
        posted_ahead = False
        if sc.plain and not (i == last and lane.bucketed):
            # compute_step's common case inlined (no CP, FSDP or host time; no buckets to release)
            t0 = env.now
            yield env.timeout(sc.compute_s * lane.factor())
            t1 = env.now
            lane.tally.compute += t1 - t0
            if lane.track is not None:
                _record_compute(ctx, lane, step, sc, t0, t1)
            if sc.mp_s > 0:
                yield comm(ctx, sc.mp_s, lane.mp, MP, sc.mp_steps)
                lane.tally.mp += env.now - t1
                if lane.track is not None:
                    lane.span(ctx, f"MP all-reduce {step.kind}{step.micro}", "mp", t1, env.now)
        elif sc.issue_s > 0:  # not plain
            # the host issues the steps in order and never waits for the GPU: the GPU starts a step
            # no earlier than the host starts issuing it, and ends it no earlier than the host is done
            started, issued = issued, issued + sc.issue_s
            if started > env.now:
                yield from host_wait(env, ctx, lane, step, started)
            yield from compute_step(env, ctx, lane, step, sc, i == last and lane.bucketed)
            if issued > env.now:
                yield from host_wait(env, ctx, lane, step, issued)
        else:
            yield from compute_step(env, ctx, lane, step, sc, i == last and lane.bucketed)
        if rendezvous and i < last:
            posted_ahead = post_next_receive(env, ctx, lane, step, steps[i + 1])
        if sc.dest is not None:
            # Send the output to (stage, chunk) sc.dest. NCCL send/recv is a rendezvous: the transfer
            # starts once the receiver has posted its receive; until then the sender waits (exposed P2P).
            # Inline (not a sub-generator): one per step of every replica.
            ds, dc = sc.dest
            key = (ds, replica, step.kind, step.micro, dc)
            tally = lane.tally
            if rendezvous:
                t1 = env.now
                yield meet(env, posted, key)
                tally.pp += env.now - t1
                tally.pp_wait += env.now - t1
                if lane.track is not None:
                    lane.span(ctx, f"P2P wait {step.kind}{step.micro}", "pp_wait", t1, env.now)
            if sc.p2p_s > 0:
                t1 = env.now
                yield p2p_transfer(ctx, lane, sc.p2p_s, ds)
                tally.pp += env.now - t1
                if lane.track is not None:
                    lane.span(ctx, f"P2P {step.kind}{step.micro}", "pp", t1, env.now)
            meet(env, mailbox, key).succeed()
    t = lane.tally
    # Waiting for a receiver is blocked in a send (exposed P2P) but moves no data: a bubble. FSDP's
    # gathers and reduce-scatters inside the steps are the step's own work, as the MP and CP
    # collectives are (dp_allgather holds only those here: the ZeRO-1 all-gather comes after the update).
    t.pipeline_busy = t.compute + t.mp + t.cp + t.host + t.dp_allgather + t.pp - t.pp_wait
    ctx.drained.arrive()
    yield from gradient_sync(env, ctx, lane)
    yield from update(env, ctx, lane)
    t.end = env.now
    ctx.finished.arrive()


def host_wait(env: simpy.Environment, ctx: Build, lane: Lane, step: Step, until: float) -> Process:
    """The GPU idle until ``until`` on its stage's host clock (a stage that issues ahead): host time."""
    t0 = env.now
    yield env.timeout(until - t0)
    lane.tally.host += env.now - t0
    if lane.track is not None:
        lane.span(ctx, f"host {step.kind}{step.micro}", "host", t0, env.now)


def compute_step(env: simpy.Environment, ctx: Build, lane: Lane, step: Step, sc: StepCost,
                 ready_buckets: bool) -> Process:
    """The step's compute and its MP all-reduces. The last backward of a bucketed stage readies its
    gradient buckets (:attr:`Lane.releases`): at the fractions of its work where the framework has
    them (PyTorch DDP), with ``overlap_dp`` bucket k after (k+1)/n of it, else all at its end."""
    releases = lane.releases if ready_buckets else ((1.0, 0),)
    tally = lane.tally
    t0 = env.now
    done = 0.0
    first = 0
    # interference: the stage's DP all-reduces that run during this backward slow it (and are
    # slowed by it); the compute they cost accrues in overlap.lost_s and is paid at each piece's end
    overlap = ctx.dp_sync[lane.stage].overlap if ready_buckets and ctx.opts.interference else None
    paid = 0.0
    if overlap is not None:
        overlap.computing += 1
        paid = overlap.lost_s
    for frac, upto in releases:
        share = frac - done
        done = frac
        yield env.timeout(sc.compute_s * lane.factor() * share)
        if overlap is not None and overlap.lost_s > paid:
            owed, paid = overlap.lost_s - paid, overlap.lost_s
            yield env.timeout(owed)
        t1 = env.now
        tally.compute += t1 - t0
        if lane.track is not None:
            _record_compute(ctx, lane, step, sc, t0, t1)
        if sc.mp_s > 0:
            yield comm(ctx, sc.mp_s * share, lane.mp, MP, sc.mp_steps * share)
            tally.mp += env.now - t1
            if lane.track is not None:
                lane.span(ctx, f"MP all-reduce {step.kind}{step.micro}", "mp", t1, env.now)
        if sc.cp_s > 0:  # the K/V ring's sends the attention did not hide
            t2 = env.now
            yield comm(ctx, sc.cp_s * share, lane.cp, CP)
            tally.cp += env.now - t2
            if lane.track is not None:
                lane.span(ctx, f"CP ring {step.kind}{step.micro}", "cp", t2, env.now)
        if sc.fsdp_s > 0:  # FSDP2's exposed all-gathers and reduce-scatters (the ZeRO-3 gather)
            t2 = env.now
            yield comm(ctx, sc.fsdp_s * share, lane.fsdp, DP_AG)
            tally.dp_allgather += env.now - t2
            if lane.track is not None:
                lane.span(ctx, f"FSDP {step.kind}{step.micro}", "dp_allgather", t2, env.now)
        if sc.host_s > 0:  # the host still issuing this step's work after the GPU is done
            t2 = env.now
            yield env.timeout(sc.host_s * share)
            tally.host += env.now - t2
            if lane.track is not None:
                lane.span(ctx, f"host {step.kind}{step.micro}", "host", t2, env.now)
        if ready_buckets:
            sync = ctx.dp_sync[lane.stage]
            for k in range(first, upto):
                sync.bucket_ready[k].arrive()
            first = upto
        t0 = env.now
    if overlap is not None:
        overlap.computing -= 1


def _releases(ready: tuple[float, ...], n_buckets: int, overlap: bool) -> tuple[tuple[float, int], ...]:
    """(fraction of the last backward, buckets ready by then) at each point where buckets become
    ready, ending at (1.0, n_buckets)."""
    if ready:  # non-decreasing and in [0, 1] by construction (sim.costs._segment_ends)
        out: list[tuple[float, int]] = []
        for k, f in enumerate(ready, start=1):
            if out and out[-1][0] == f:
                out[-1] = (f, k)
            else:
                out.append((f, k))
        if out[-1][0] < 1.0:
            out.append((1.0, len(ready)))
        return tuple(out)
    if overlap and n_buckets:
        return tuple(((k + 1) / n_buckets, k + 1) for k in range(n_buckets))
    return ((1.0, n_buckets),)


def _record_compute(ctx: Build, lane: Lane, step: Step, sc: StepCost, t0: float, t1: float) -> None:
    rec = ctx.recorder
    assert rec is not None and lane.track is not None
    kind, micro, chunk = step.kind, step.micro, step.chunk
    name = f"{kind}{micro}" + (f".{chunk}" if ctx.chunks > 1 else "")
    if kind == StepKind.F:
        rec.span(lane.track, name, "forward", t0, t1, micro, chunk)
        return
    r = min(t1 - t0, sc.recompute_s / max(sc.compute_s, 1e-300) * (t1 - t0)) if sc.recompute_s else 0.0
    rec.span(lane.track, name + " recompute", "recompute", t0, t0 + r, micro, chunk)
    rec.span(lane.track, name, "backward", t0 + r, t1, micro, chunk)


def post_next_receive(env: simpy.Environment, ctx: Build, lane: Lane, step: Step, nxt: Step) -> bool:
    """Megatron batches a send with the receive of the next step when the kind changes
    (send_forward_recv_backward, send_backward_recv_forward): that receive is posted before the
    send starts. In warm-up (F, F) and drain (B, B) the calls are sequential: the receive is
    posted only after the send. Returns whether it posted."""
    if nxt.kind != step.kind and lane.table[nxt.kind, nxt.chunk].needs_input:
        meet(env, ctx.posted, (lane.stage, lane.replica, nxt.kind, nxt.micro, nxt.chunk)).succeed()
        return True
    return False


def p2p_transfer(ctx: Build, lane: Lane, base_s: float, dest_stage: int) -> simpy.Event:
    """The P2P transfer of ``base_s`` seconds alone from the lane's stage to ``dest_stage``."""
    if not ctx.opts.p2p_transfers:
        return ctx.env.timeout(base_s)
    way = lane.p2p.get(dest_stage)
    if way is None:
        routes, s = ctx.routes, lane.stage
        rates = routes.p2p.get((s, dest_stage, lane.replica)) if routes else None
        way = lane.p2p[dest_stage] = way_of(ctx, rates, PP, (s, dest_stage))
    return comm(ctx, base_s, way, PP, 1.0)


def gradient_sync(env: simpy.Environment, ctx: Build, lane: Lane) -> Process:
    """Wait for the stage's DP all-reduce, then for every stage's (the gradient-norm barrier)."""
    s = lane.stage
    st = ctx.costs.stages[s]
    t1 = env.now
    if lane.bucketed:
        yield ctx.dp_sync[s].ar_done
    elif ctx.opts.bucketed_dp or st.dp_allreduce_s <= 0:
        pass  # dp == 1: nothing to reduce
    else:
        yield comm(ctx, st.dp_allreduce_s, way_of(ctx, None, DP_AR, s), DP_AR)
        lane.span(ctx, "DP all-reduce", "dp_allreduce", t1, env.now)
    t_ar = env.now
    ctx.synced.arrive()
    yield ctx.synced.event
    # Exposed DP all-reduce: what it added beyond the pipeline drain.
    lane.tally.dp_allreduce = max(0.0, t_ar - max(t1, ctx.drained.fired_at))


def update(env: simpy.Environment, ctx: Build, lane: Lane) -> Process:
    """The optimizer step and the ZeRO-1 all-gather (bucketed mode), or Eq. 7's update.

    The optimizer slot also carries what the framework does once per update besides the step:
    the fp32 gradient accumulation kernels of framework "hf" (summed here, as Eq. 7 does) and the
    runtime's per-iteration host time."""
    s, tally = lane.stage, lane.tally
    st = ctx.costs.stages[s]
    t2 = env.now
    if ctx.opts.bucketed_dp:
        yield env.timeout((st.optimizer_s + st.grad_accum_s) * lane.factor() + st.host_update_s)
        t3 = env.now
        tally.optimizer = t3 - t2
        lane.span(ctx, "optimizer", "optimizer", t2, t3)
        if ctx.syncs_gradients:
            sync = ctx.dp_sync[s]
            sync.ag_ready.arrive()
            yield sync.ag_done
            tally.dp_allgather += env.now - t3
            lane.span(ctx, "DP all-gather", "dp_allgather", t3, env.now)
    else:
        yield env.timeout(st.update_s)
        tally.optimizer = env.now - t2
        lane.span(ctx, "update", "update", t2, env.now)


# -- a stage's DP collectives (bucketed mode) -----------------------------------------------------------

def _collectives_track(ctx: Build, s: int) -> int | None:
    return ctx.recorder.collectives(s) if ctx.recorder is not None else None


def dp_allreduce_process(env: simpy.Environment, ctx: Build, s: int) -> Process:
    """The stage's gradient buckets, one after another, each once every replica has it ready."""
    sync: StageSync = ctx.dp_sync[s]
    routes = ctx.routes
    track = _collectives_track(ctx, s)
    st = ctx.costs.stages[s]
    on = ctx.opts.interference
    for k, base in enumerate(st.dp_bucket_s):
        yield sync.bucket_ready[k].event
        t0 = env.now
        rates = routes.dp_ar.get((s, k)) if routes else None
        # A bucket that starts while the backward computes shares the GPUs with it: it runs slower
        # (interference_dp), and for as long as it runs the compute does 1/interference_compute of
        # its work, a loss the backward pays (Overlap.lost_s; see compute_step).
        overlapped = on and sync.overlap.computing > 0
        yield comm(ctx, base * (st.interference_dp if overlapped else 1.0), way_of(ctx, rates, DP_AR, s), DP_AR)
        if overlapped:
            sync.overlap.lost_s += (env.now - t0) * (1.0 - 1.0 / st.interference_compute)
        if track is not None and ctx.recorder is not None:
            ctx.recorder.span(track, f"all-reduce bucket {k}", "dp_allreduce", t0, env.now)
    sync.ar_done.succeed()


def dp_allgather_process(env: simpy.Environment, ctx: Build, s: int) -> Process:
    """The stage's ZeRO-1 parameter all-gather, once every replica has run its optimizer step."""
    if not ctx.syncs_gradients:
        return
    sync = ctx.dp_sync[s]
    yield sync.ag_ready.event
    t0 = env.now
    routes = ctx.routes
    rates = routes.dp_ag.get(s) if routes else None
    yield comm(ctx, ctx.costs.stages[s].dp_allgather_s, way_of(ctx, rates, DP_AG, s), DP_AG)
    track = _collectives_track(ctx, s)
    if track is not None and ctx.recorder is not None:
        ctx.recorder.span(track, "all-gather", "dp_allgather", t0, env.now)
    sync.ag_done.succeed()
