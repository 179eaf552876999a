"""The discrete-event simulation of one training iteration (SimPy).

One process per (stage, DP replica) walks its stage's schedule (:mod:`sim.schedule`);
the MP ranks of a group move in lock-step and are one entity. Messages between stages
are one-shot events in a mailbox keyed by (stage, replica, kind, micro, chunk). All
durations come precomputed from :class:`sim.costs.StageCost`; nothing is predicted here.

Modes (see :class:`SimOptions`; ``compare`` switches the effects on one at a time):

* **ideal** — Eq. 7's assumptions: every forward slot is ``max_fwd_s`` and every backward
  slot ``max_bwd_s`` (MP syncs and the P2P send inside, charged to the sender), no links.
  After its last backward a stage runs its DP all-reduce (``dp_allreduce_s``); its update
  (``update_s``) starts once every stage's all-reduce is done (the framework's global
  gradient-norm all-reduce is a barrier before the optimizer step). Stage s drains
  ``s * max_bwd`` before stage 0, so the iteration ends ``max_s max(0, AR_s - s*B) +
  max_s U_s`` after the pipeline: exactly :func:`sim.eq7.eq7`'s ``iteration_s``.
* **realistic** — each stage's own compute times; the MP all-reduces of one forward or
  backward step are merged into one transfer (their summed duration; the per-sync rate is
  the same, so contention is unchanged apart from when within the step it happens) over the
  MP group's links; the P2P send is a blocking rendezvous transfer, as NCCL send/recv in
  Megatron's 1F1B: it starts once the receiver has posted the matching receive (batched
  with the receiver's own send when the step kind changes, after it in warm-up and drain),
  and the receiver waits for arrival;
  the DP gradient all-reduce is bucketed: every bucket is ready when the stage's last
  backward ends (DeepSpeed's pipeline engine, which GPT-NeoX and the paper use), or, with
  ``overlap_dp`` (Megatron-LM's overlap_grad_reduce), bucket k after (k+1)/n of it; buckets
  run one after another as a collective of all DP replicas on the DP groups' links while
  earlier stages still compute. No stage starts its optimizer step before every stage's
  gradients are reduced (the global gradient-norm / overflow all-reduce is a barrier);
  then the ZeRO-1 optimizer step and the parameter all-gather (a collective). A collective
  starts when all members have arrived. The iteration ends when every stage replica has
  finished.

Exposed communication (``SimResult.exposed``): on the *critical* stage replica (the last
to finish; ties go to the lowest stage, then replica) the seconds its own timeline was
blocked in each kind of communication: MP all-reduces, P2P sends, waiting for its stage's
DP all-reduce after its last backward (beyond the pipeline drain), and the all-gather.
Communication on other stages that delays the critical one appears there as waiting,
which ``compare`` attributes by cause.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import simpy

from trainsim.operators import CollKind
from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Schedule
from trainsim.sim.costs import IterationCosts, StageCost
from trainsim.sim.eq7 import eq7
from trainsim.sim.network import Network
from trainsim.sim.schedule import Step, build_schedule
from trainsim.topology import ClusterSpec, LinkModel, Placement

EXPOSED_KINDS = ("mp", "pp", "dp_allreduce", "dp_allgather")


class Perturbation(Protocol):
    """Jitter hook: multiplies durations and may run congestion processes."""

    def compute_factor(self, stage: int, replica: int, rng: np.random.Generator) -> float: ...

    def comm_factor(self, kind: str, tier: str, rng: np.random.Generator) -> float: ...

    def processes(self, env: simpy.Environment, network: Network, rng: np.random.Generator) -> list: ...


@dataclass(frozen=True)
class SimOptions:
    """Which departures from Eq. 7 are simulated (all off: ideal; all on: realistic)."""

    own_stage_times: bool = True  # False: every slot is Max_Fwd / Max_Bwd (comm inside)
    p2p_transfers: bool = True  # P2P as a blocking transfer instead of sender compute
    bucketed_dp: bool = True  # bucketed DP collective of all replicas instead of AR_s after the last B
    contention: bool = True  # transfers share links (max-min fair) instead of plain delays
    # Gradient buckets become ready during the last backward (Megatron-LM's overlap_grad_reduce)
    # instead of after it (DeepSpeed's pipeline engine, GPT-NeoX: the paper's framework).
    overlap_dp: bool = False


IDEAL = SimOptions(False, False, False, False)
REALISTIC = SimOptions(True, True, True, True)
SWITCHES = ("own_stage_times", "p2p_transfers", "bucketed_dp", "contention")


@dataclass(frozen=True)
class Span:
    track: str
    name: str
    cat: str  # forward, backward, recompute, mp, pp, pp_wait, dp_allreduce, optimizer, dp_allgather, update, link
    start_s: float
    end_s: float
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SimResult:
    iteration_s: float
    eq7_s: float
    sim_wall_s: float  # perf_counter seconds of env.run()
    events: int  # SimPy events processed
    mode: str
    exposed: dict[str, float]  # see module doc; keys EXPOSED_KINDS
    bubble_share: float  # idle share of stage replicas over [0, pipeline drained]
    pipeline_s: float  # when the last backward of any stage ended
    critical: tuple[int, int]  # (stage, replica) that finished last
    model_flops: float  # model FLOPs of the iteration, all GPUs (recompute excluded)
    mfu: float | None  # model_flops / (iteration_s * gpus * peak_flops)
    tokens_per_s: float | None  # only when tokens_per_iteration was given
    seed: int
    pp: int
    dp: int
    breakdown: dict[str, float] = field(default_factory=dict)  # the critical replica's timeline, adds up
    spans: tuple[Span, ...] = ()

    def components(self) -> dict[str, float]:
        out = {"iteration_s": self.iteration_s, "eq7_s": self.eq7_s, "pipeline_s": self.pipeline_s,
               "bubble_share": self.bubble_share}
        out.update({f"exposed_{k}_s": v for k, v in self.exposed.items()})
        return out


class _Rendezvous:
    """A counter that fires its event when ``n`` members have arrived."""

    __slots__ = ("n", "count", "event")

    def __init__(self, env: simpy.Environment, n: int) -> None:
        self.n, self.count, self.event = n, 0, env.event()

    def arrive(self) -> None:
        self.count += 1
        if self.count == self.n:
            self.event.succeed()


def _saturating(loads: dict[str, float], caps: dict[str, float]) -> dict[str, float]:
    """Nominal rates when the message size is unknown: the transfer alone saturates its tightest link."""
    if not loads:
        return {}
    scale = min(caps[e] / w for e, w in loads.items() if w > 0)
    return {e: w * scale for e, w in loads.items() if w > 0}


def _add(into: dict[str, float], rates: dict[str, float]) -> None:
    for e, r in rates.items():
        into[e] = into.get(e, 0.0) + r


class _Routes:
    """Per-link nominal rates of every transfer the simulation will start (built once)."""

    def __init__(self, costs: IterationCosts, cluster: ClusterSpec, chunks: int) -> None:
        par = costs.parallelism
        self.placement = pl = Placement(par, cluster.gpus_per_node)
        self.links = lm = LinkModel(cluster, pl)
        caps = lm.capacities
        self.capacities = caps
        pp, dp, mp = par.pp, par.dp, par.mp

        def member_rates(loads: dict[str, float], nbytes: float | None, base_s: float) -> dict[str, float]:
            if nbytes is None or base_s <= 0:
                return _saturating(loads, caps)
            return {e: min(w * nbytes / base_s, caps[e]) for e, w in loads.items() if w > 0}

        def tier(rates: dict[str, float]) -> str:
            return "nic" if any(lm.tier(e) == "nic" for e in rates) else "nvlink"

        self.mp: dict[tuple[int, int], dict[str, float]] = {}
        self.p2p: dict[tuple[int, int, int], dict[str, float]] = {}  # (src stage, dst stage, replica)
        self.tier: dict[object, str] = {}
        for s in range(pp):
            st = costs.stages[s]
            mp_bytes = st.mp_allreduce_bytes or None  # 0: size unknown, assume it saturates
            for r in range(dp):
                if mp > 1:
                    rates = member_rates(lm.loads(CollKind.ALL_REDUCE, pl.mp_group(s, r)), mp_bytes,
                                         st.mp_allreduce_s)
                    self.mp[s, r] = rates
                    self.tier["mp", s] = tier(rates)
        boundaries = [(s, s + 1) for s in range(pp - 1)]
        if chunks > 1 and pp > 1:
            boundaries.append((pp - 1, 0))  # interleaved: the last rank feeds rank 0's next chunk
        for a, b in boundaries:
            for src, dst in ((a, b), (b, a)):
                # P2P cost of a boundary: stage a's forward send (its backward send mirrors it).
                st = costs.stages[min(a, b)] if (a, b) != (pp - 1, 0) else costs.stages[0]
                base = st.p2p_fwd_s
                nbytes = st.p2p_bytes or None
                for r in range(dp):
                    rates: dict[str, float] = {}
                    for i in range(mp):
                        _add(rates, member_rates(lm.loads_p2p(pl.rank(src, r, i), pl.rank(dst, r, i)), nbytes, base))
                    self.p2p[src, dst, r] = rates
                    self.tier["pp", src, dst] = tier(rates)
        self.dp_ar: dict[tuple[int, int], dict[str, float]] = {}
        self.dp_ag: dict[int, dict[str, float]] = {}
        for s in range(pp):
            st = costs.stages[s]
            if dp == 1:
                continue
            bucket_bytes = st.dp_bucket_bytes or (None,) * len(st.dp_bucket_s)
            ag_bytes = st.dp_allgather_bytes or None
            for k, base in enumerate(st.dp_bucket_s):
                rates = {}
                for i in range(mp):
                    _add(rates, member_rates(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(s, i)), bucket_bytes[k], base))
                self.dp_ar[s, k] = rates
            rates = {}
            for i in range(mp):
                _add(rates, member_rates(lm.loads(CollKind.ALL_GATHER, pl.dp_group(s, i)), ag_bytes,
                                         st.dp_allgather_s))
            self.dp_ag[s] = rates
            if self.dp_ar:
                self.tier["dp_allreduce", s] = tier(self.dp_ar.get((s, 0), {}))
            self.tier["dp_allgather", s] = tier(rates)


@dataclass
class _Tally:
    """Seconds one stage replica spent per activity (its timeline adds up to its end time)."""

    compute: float = 0.0
    mp: float = 0.0
    pp: float = 0.0
    dp_allreduce: float = 0.0
    dp_allgather: float = 0.0
    optimizer: float = 0.0
    pipeline_busy: float = 0.0  # compute + MP + P2P up to the last backward
    end: float = 0.0


def _schedule_of(costs: IterationCosts, schedule: Schedule | str | None) -> tuple[Schedule, int]:
    par = costs.parallelism
    if schedule is None:
        schedule = par.schedule
    if isinstance(schedule, str):
        try:
            schedule = Schedule(schedule.lower())
        except ValueError:
            raise ConfigError("parallelism.schedule", f"unknown schedule {schedule!r}") from None
    chunks = par.virtual_stages if schedule is Schedule.INTERLEAVED_1F1B else 1
    return schedule, chunks


def simulate(
    costs: IterationCosts,
    cluster: ClusterSpec | None,
    *,
    mode: str = "realistic",
    seed: int = 0,
    perturb: Perturbation | None = None,
    record: bool = False,
    schedule: Schedule | str | None = None,
    tokens_per_iteration: float | None = None,
    peak_flops: float | None = None,
    options: SimOptions | None = None,
    overlap_dp: bool = False,
) -> SimResult:
    """Simulate one iteration. ``options`` overrides ``mode``'s effect switches (used by compare).

    ``cluster`` may be None only when no switch needs links (ideal, or contention off).
    MFU uses ``peak_flops`` or else ``cluster.gpu.peak_flops``.
    """
    if mode not in ("realistic", "ideal"):
        raise ConfigError("simulation.mode", f"unknown mode {mode!r}; expected realistic or ideal")
    if options is not None:
        opts = options
    else:
        opts = IDEAL if mode == "ideal" else dataclasses.replace(REALISTIC, overlap_dp=overlap_dp)
    if perturb is not None and opts == IDEAL:
        raise ConfigError("simulation.mode", "jitter needs the realistic mode; the ideal mode follows Eq. 7")
    sched, chunks = _schedule_of(costs, schedule)
    par = costs.parallelism
    pp, dp, m = costs.pp, par.dp, costs.micro_batches
    if pp != par.pp:
        raise ConfigError("parallelism.pp", f"costs have {pp} stages but parallelism.pp is {par.pp}")
    steps = [build_schedule(sched, pp, m, s, chunks) for s in range(pp)]

    needs_links = opts.contention
    if needs_links and cluster is None:
        raise ConfigError("cluster", "the realistic simulation needs a cluster")
    routes = _Routes(costs, cluster, chunks) if needs_links else None

    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    net = Network(env, routes.capacities if routes else {}, record=record)
    spans: list[Span] | None = [] if record else None
    sim = _Simulation(env, net, routes, costs, opts, steps, chunks, perturb, rng, spans)
    if perturb is not None:
        for proc in perturb.processes(env, net, rng):
            env.process(proc)

    t0 = time.perf_counter()
    env.run(until=sim.finished.event)
    wall = time.perf_counter() - t0

    tallies = sim.tallies
    iteration = env.now
    critical = max(tallies, key=lambda k: (tallies[k].end, -k[0], -k[1]))
    crit = tallies[critical]
    exposed = {"mp": crit.mp, "pp": crit.pp, "dp_allreduce": crit.dp_allreduce, "dp_allgather": crit.dp_allgather}
    pipe = sim.pipeline_end
    busy = sum(t.pipeline_busy for t in tallies.values())
    bubble = 1.0 - busy / (len(tallies) * pipe) if pipe > 0 else 0.0
    if abs(bubble) < 1e-12:  # float rounding of a bubble-free pipeline (pp = 1), not a negative share
        bubble = 0.0
    model_flops = sum(s.fwd_flops + s.bwd_flops for s in costs.stages) * m * par.mp * dp
    peak = peak_flops if peak_flops is not None else (cluster.gpu.peak_flops if cluster is not None else None)
    mfu = model_flops / (iteration * par.gpus * peak) if peak and iteration > 0 else None
    tps = tokens_per_iteration / iteration if tokens_per_iteration and iteration > 0 else None
    if record:
        for link, intervals in net.busy.items():
            for start, end, kind in intervals:
                spans.append(Span(link, kind, "link", start, iteration if end is None else end))
    return SimResult(
        iteration_s=iteration, eq7_s=eq7(costs).iteration_s, sim_wall_s=wall,
        events=sim.event_count(), mode=mode if options is None else _label(opts),
        exposed=exposed, bubble_share=bubble, pipeline_s=pipe, critical=critical,
        model_flops=model_flops, mfu=mfu, tokens_per_s=tps, seed=seed, pp=pp, dp=dp,
        breakdown=_breakdown(crit), spans=tuple(spans) if spans is not None else (),
    )


def _breakdown(t: _Tally) -> dict[str, float]:
    """Seconds of the critical stage replica's timeline per activity; ``idle`` is the rest (waiting)."""
    parts = {"compute": t.compute, "mp": t.mp, "pp": t.pp, "dp_allreduce": t.dp_allreduce,
             "optimizer": t.optimizer, "dp_allgather": t.dp_allgather}
    parts["idle"] = max(0.0, t.end - sum(parts.values()))
    return parts


def _label(o: SimOptions) -> str:
    if o == IDEAL:
        return "ideal"
    if dataclasses.replace(o, overlap_dp=False) == REALISTIC:
        return "realistic"
    on = [k for k in SWITCHES if getattr(o, k)]
    return "custom:" + "+".join(on)


@dataclass(frozen=True)
class _StepCost:
    compute_s: float
    recompute_s: float
    mp_s: float
    p2p_s: float
    dest: tuple[int, int] | None  # (stage, chunk) that receives this step's output
    needs_input: bool


class _Simulation:
    """Builds the processes of one run; holds the shared state they touch."""

    def __init__(self, env, net, routes, costs: IterationCosts, opts: SimOptions, steps, chunks, perturb, rng,
                 spans) -> None:
        self.env, self.net, self.routes, self.costs, self.opts = env, net, routes, costs, opts
        self.perturb, self.rng, self.spans = perturb, rng, spans
        par = costs.parallelism
        self.pp, self.dp, self.chunks = costs.pp, par.dp, chunks
        self.mailbox: dict[tuple, simpy.Event] = {}
        self.posted: dict[tuple, simpy.Event] = {}  # receives posted, for the P2P rendezvous
        n = self.pp * self.dp
        self.tallies: dict[tuple[int, int], _Tally] = {}
        self.drained = _Rendezvous(env, n)
        self.finished = _Rendezvous(env, n)
        # The framework's global gradient-norm / overflow all-reduce before the optimizer step:
        # no stage updates before every stage's gradients are reduced.
        self.synced = _Rendezvous(env, n)
        self.pipeline_end = 0.0
        self.drained.event.callbacks.append(self._on_drained)
        self.tables = [self._step_costs(st) for st in costs.stages]
        self._timeouts = 0
        # DP collectives (bucketed mode): a rendezvous per (stage, bucket), a done event per stage.
        self.bucket_ready: dict[tuple[int, int], _Rendezvous] = {}
        self.ar_done: dict[int, simpy.Event] = {}
        self.ag_ready: dict[int, _Rendezvous] = {}
        self.ag_done: dict[int, simpy.Event] = {}
        if opts.bucketed_dp:
            for s, st in enumerate(costs.stages):
                for k in range(len(st.dp_bucket_s)):
                    self.bucket_ready[s, k] = _Rendezvous(env, self.dp)
                self.ar_done[s] = env.event()
                self.ag_ready[s] = _Rendezvous(env, self.dp)
                self.ag_done[s] = env.event()
                env.process(self._dp_allreduce(s, st))
                env.process(self._dp_allgather(s, st))
        for s in range(self.pp):
            for r in range(self.dp):
                self.tallies[s, r] = _Tally()
                env.process(self._stage(s, r, steps[s]))

    def event_count(self) -> int:
        # SimPy keeps no counter; its event ids are a running count of scheduled events.
        return int(next(self.env._eid))  # noqa: SLF001 - documented itertools.count in simpy 4

    def _on_drained(self, _ev) -> None:
        self.pipeline_end = self.env.now

    # -- per-step durations ---------------------------------------------------------------------
    def _step_costs(self, st: StageCost) -> dict[tuple[str, int], _StepCost]:
        costs, opts, pp, v = self.costs, self.opts, self.pp, self.chunks
        s = st.index
        out = {}
        for c in range(v):
            vs = c * pp + s  # virtual stage
            last_vs = vs == pp * v - 1
            nxt = ((vs + 1) % pp, (vs + 1) // pp) if not last_vs else None
            prv = ((vs - 1) % pp, (vs - 1) // pp) if vs > 0 else None
            wrap_p2p = costs.stages[0].p2p_fwd_s  # interleaved: rank pp-1 -> rank 0 (same message)
            if not opts.own_stage_times:
                f = max(x.fwd_s for x in costs.stages) / v
                b = max(x.bwd_s for x in costs.stages) / v
                out["F", c] = _StepCost(f, 0.0, 0.0, 0.0, nxt, prv is not None)
                out["B", c] = _StepCost(b, 0.0, 0.0, 0.0, prv, nxt is not None)
                continue
            p2p_f = st.p2p_fwd_s if s < pp - 1 else (wrap_p2p if nxt is not None else 0.0)
            p2p_b = st.p2p_bwd_s if s > 0 else (wrap_p2p if prv is not None else 0.0)
            out["F", c] = _StepCost(st.fwd_compute_s / v, 0.0, st.mp_fwd_s / v, p2p_f, nxt, prv is not None)
            out["B", c] = _StepCost(st.bwd_compute_s / v, st.recompute_s / v, st.mp_bwd_s / v, p2p_b, prv,
                                    nxt is not None)
        return out

    # -- helpers ----------------------------------------------------------------------------------
    def _meet(self, box: dict[tuple, simpy.Event], key: tuple) -> simpy.Event:
        """The event two parties share for ``key``: the first to ask creates it, the second takes
        it out of ``box``. Every key is touched exactly twice, so the boxes stay small."""
        ev = box.pop(key, None)
        if ev is None:
            ev = box[key] = self.env.event()
        return ev

    def _comm(self, base_s: float, rates: dict[str, float] | None, kind: str, tier_key) -> simpy.Event:
        if self.perturb is not None:
            tier = self.routes.tier.get(tier_key, "nic") if self.routes else "nic"
            base_s *= self.perturb.comm_factor(kind, tier, self.rng)
        if self.opts.contention and rates:
            return self.net.transfer_rates(base_s, rates, kind)
        return self.env.timeout(base_s)

    def _cf(self, s: int, r: int) -> float:
        return 1.0 if self.perturb is None else self.perturb.compute_factor(s, r, self.rng)

    def _span(self, track: str, name: str, cat: str, start: float, end: float, **args) -> None:
        if end > start:
            self.spans.append(Span(track, name, cat, start, end, args))

    # -- processes ---------------------------------------------------------------------------------
    def _stage(self, s: int, r: int, steps: tuple[Step, ...]):
        env, opts, routes = self.env, self.opts, self.routes
        table = self.tables[s]
        tally = self.tallies[s, r]
        record = self.spans is not None
        track = f"stage {s} replica {r}"
        mp_rates = routes.mp.get((s, r)) if routes else None
        bucketed = opts.bucketed_dp and self.dp > 1 and bool(self.costs.stages[s].dp_bucket_s)
        n_buckets = len(self.costs.stages[s].dp_bucket_s) if bucketed else 0
        last = len(steps) - 1
        # The rendezvous follows Megatron's non-interleaved 1F1B (and GPipe) call order. Its
        # interleaved schedule exchanges in lock-step at every step; there sends stay eager.
        rendezvous = opts.p2p_transfers and self.chunks == 1
        compute = mp_t = pp_t = pp_wait = 0.0
        posted_ahead = False  # this step's receive was posted with the previous step's send
        for i, step in enumerate(steps):
            kind, micro, chunk = step.kind, step.micro, step.chunk
            sc = table[kind, chunk]
            if sc.needs_input:
                if rendezvous and not posted_ahead:
                    self._meet(self.posted, (s, r, kind, micro, chunk)).succeed()
                yield self._meet(self.mailbox, (s, r, kind, micro, chunk))
            posted_ahead = False
            t0 = env.now
            # With overlap, the last backward readies gradient bucket k after (k+1)/n of its work;
            # without, every bucket is ready when it ends.
            arrive = i == last and bucketed
            split = n_buckets if arrive and opts.overlap_dp else 1
            for piece in range(split):
                yield env.timeout(sc.compute_s * self._cf(s, r) / split)
                t1 = env.now
                compute += t1 - t0
                if record:
                    self._record_compute(track, kind, micro, chunk, sc, t0, t1)
                if sc.mp_s > 0:
                    yield self._comm(sc.mp_s / split, mp_rates, "mp", ("mp", s))
                    mp_t += env.now - t1
                    if record:
                        self._span(track, f"MP all-reduce {kind}{micro}", "mp", t1, env.now)
                if arrive:
                    for k in range(piece, n_buckets if split == 1 else piece + 1):
                        self.bucket_ready[s, k].arrive()
                t0 = env.now
            if rendezvous and i < last:
                # Megatron batches a send with the receive of the next step when the kind
                # changes (send_forward_recv_backward, send_backward_recv_forward): that
                # receive is posted before the send starts. In warm-up (F, F) and drain (B, B)
                # the calls are sequential: the receive is posted only after the send.
                nxt = steps[i + 1]
                if nxt.kind != kind and table[nxt.kind, nxt.chunk].needs_input:
                    self._meet(self.posted, (s, r, nxt.kind, nxt.micro, nxt.chunk)).succeed()
                    posted_ahead = True
            if sc.dest is not None:
                ds, dc = sc.dest
                if rendezvous:
                    # NCCL send/recv is a rendezvous: the transfer starts once the receiver has
                    # posted its receive; until then the sender waits (exposed P2P).
                    t1 = env.now
                    yield self._meet(self.posted, (ds, r, kind, micro, dc))
                    pp_t += env.now - t1
                    pp_wait += env.now - t1
                    if record:
                        self._span(track, f"P2P wait {kind}{micro}", "pp_wait", t1, env.now)
                if sc.p2p_s > 0:
                    t1 = env.now
                    if opts.p2p_transfers:
                        rates = routes.p2p.get((s, ds, r)) if routes else None
                        yield self._comm(sc.p2p_s, rates, "pp", ("pp", s, ds))
                    else:
                        yield env.timeout(sc.p2p_s)
                    pp_t += env.now - t1
                    if record:
                        self._span(track, f"P2P {kind}{micro}", "pp", t1, env.now)
                self._meet(self.mailbox, (ds, r, kind, micro, dc)).succeed()
        tally.compute, tally.mp, tally.pp = compute, mp_t, pp_t
        # Waiting for a receiver is blocked in a send (exposed P2P) but moves no data: a bubble.
        tally.pipeline_busy = compute + mp_t + pp_t - pp_wait
        self.drained.arrive()
        st = self.costs.stages[s]
        # Gradient synchronisation.
        t1 = env.now
        if bucketed:
            yield self.ar_done[s]
        elif opts.bucketed_dp or st.dp_allreduce_s <= 0:
            pass  # dp == 1: nothing to reduce
        else:
            yield self._comm(st.dp_allreduce_s, None, "dp_allreduce", ("dp_allreduce", s))
            if record:
                self._span(track, "DP all-reduce", "dp_allreduce", t1, env.now)
        t_ar = env.now
        self.synced.arrive()
        yield self.synced.event
        # Exposed DP all-reduce: what it added beyond the pipeline drain.
        tally.dp_allreduce = max(0.0, t_ar - max(t1, self.pipeline_end))
        t2 = env.now
        if opts.bucketed_dp:
            yield env.timeout(st.optimizer_s * self._cf(s, r))
            t3 = env.now
            tally.optimizer = t3 - t2
            if record:
                self._span(track, "optimizer", "optimizer", t2, t3)
            if self.dp > 1:
                self.ag_ready[s].arrive()
                yield self.ag_done[s]
                tally.dp_allgather = env.now - t3
                if record:
                    self._span(track, "DP all-gather", "dp_allgather", t3, env.now)
        else:
            yield env.timeout(st.update_s)
            tally.optimizer = env.now - t2
            if record:
                self._span(track, "update", "update", t2, env.now)
        tally.end = env.now
        self.finished.arrive()

    def _record_compute(self, track, kind, micro, chunk, sc: _StepCost, t0, t1) -> None:
        name = f"{kind}{micro}" + (f".{chunk}" if self.chunks > 1 else "")
        if kind == "F":
            self._span(track, name, "forward", t0, t1, micro=micro, chunk=chunk)
            return
        rec = min(t1 - t0, sc.recompute_s / max(sc.compute_s, 1e-300) * (t1 - t0)) if sc.recompute_s else 0.0
        self._span(track, name + " recompute", "recompute", t0, t0 + rec, micro=micro, chunk=chunk)
        self._span(track, name, "backward", t0 + rec, t1, micro=micro, chunk=chunk)

    def _dp_allreduce(self, s: int, st: StageCost):
        routes = self.routes
        for k, base in enumerate(st.dp_bucket_s):
            yield self.bucket_ready[s, k].event
            t0 = self.env.now
            rates = routes.dp_ar.get((s, k)) if routes else None
            yield self._comm(base, rates, "dp_allreduce", ("dp_allreduce", s))
            if self.spans is not None:
                self._span(f"stage {s} DP collectives", f"all-reduce bucket {k}", "dp_allreduce", t0, self.env.now)
        self.ar_done[s].succeed()

    def _dp_allgather(self, s: int, st: StageCost):
        if self.dp == 1:
            return
        yield self.ag_ready[s].event
        t0 = self.env.now
        rates = self.routes.dp_ag.get(s) if self.routes else None
        yield self._comm(st.dp_allgather_s, rates, "dp_allgather", ("dp_allgather", s))
        if self.spans is not None:
            self._span(f"stage {s} DP collectives", "all-gather", "dp_allgather", t0, self.env.now)
        self.ag_done[s].succeed()

