"""Elaboration: everything a run needs, made before ``env.run()`` (desmod's build step).

:func:`elaborate` turns stage costs, a cluster and the run's switches into a :class:`Build`:
the routes (per-link rates of every transfer, :mod:`sim.routes`), the per-step cost table of
every stage, the schedules, the synchronisation points (mailboxes and posted receives of the
P2P rendezvous, the barriers, the DP collectives' rendezvous), one tally per stage replica, the
network, the perturbation bound to the run and the recorder. It starts no process; the
processes (:mod:`sim.processes`) only read it and write the tallies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from trainsim.sim.costs import IterationCosts, StageCost
from trainsim.sim.kinds import SimMode
from trainsim.sim.network import Network
from trainsim.sim.options import SimOptions
from trainsim.sim.perturb import AnyPerturbation, RunPerturbation, bind_perturbation
from trainsim.sim.record import Recorder
from trainsim.sim.routes import Routes, build_routes
from trainsim.sim.schedule import Step, StepKind
from trainsim.topology import ClusterSpec
from trainsim.topology.links import LinkId

#: A P2P message: (receiving stage, replica, step kind, micro-batch, chunk).
MessageKey = tuple[int, int, StepKind, int, int]


@dataclass(frozen=True, slots=True)
class StepCost:
    """Durations of one step of a stage (one forward or backward of one chunk)."""

    compute_s: float
    recompute_s: float
    mp_s: float
    p2p_s: float
    dest: tuple[int, int] | None  # (stage, chunk) that receives this step's output
    needs_input: bool
    host_s: float = 0.0  # the runtime's host time beyond the GPU work (sim.costs.StageCost.host_*_extra_s)
    fsdp_s: float = 0.0  # FSDP2 all-gathers / reduce-scatters its prefetching does not hide
    cp_s: float = 0.0  # context parallelism's K/V ring sends the attention does not hide
    # sequential protocol steps of the step's MP collectives (each all-reduce's ring: 2 (mp - 1)), which
    # a congestion episode's step latency delays (sim.jitter.Congestion.latency_s)
    mp_steps: float = 0.0
    # a stage whose host issues its schedule ahead (sim.costs.StageCost.host_ahead): the host's seconds
    # to issue this step, on the stage's host clock (host_s is then 0)
    issue_s: float = 0.0
    # compute and MP all-reduce only (no host, FSDP or CP time): the engine's fast path
    plain: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "plain", self.host_s <= 0 and self.fsdp_s <= 0 and self.cp_s <= 0
                           and self.issue_s <= 0)


StepTable = dict[tuple[StepKind, int], StepCost]


def step_costs(costs: IterationCosts, own_stage_times: bool, st: StageCost, chunks: int,
               host_clock: bool = True) -> StepTable:
    """The cost of every (kind, chunk) step of stage ``st``.

    Without ``own_stage_times`` (Eq. 7's assumption) every forward is ``max_fwd_s / chunks`` and
    every backward ``max_bwd_s / chunks``: the slowest stage's compute, MP syncs, host excess, FSDP and
    CP time, each charged as itself, and its P2P send inside the compute. With ``own_stage_times`` and
    ``host_clock``, a stage whose host issues ahead (``StageCost.host_ahead``) carries each step's host
    issue time (``StepCost.issue_s``) instead of its host excess.
    """
    pp, v = costs.pp, chunks
    s = st.index
    ring = 2 * (costs.mp_span[0] * costs.mp_span[1] - 1)  # an MP all-reduce's ring steps
    # Eq. 7's slots: every step is the slowest stage's, made of that stage's parts (so the breakdown says
    # where the slot goes: compute, MP syncs, host, FSDP, CP); its P2P send inside the compute, as Eq. 7
    # charges it, without a rendezvous
    slowest_f = max(costs.stages, key=lambda x: x.fwd_s) if not own_stage_times else st
    slowest_b = max(costs.stages, key=lambda x: x.bwd_s) if not own_stage_times else st

    # a stage whose host issues ahead runs its host clock in the simulation (its own times only; Eq. 7's
    # slots keep the per-step excess)
    lane = own_stage_times and host_clock and st.host_ahead

    def forward(x: StageCost, inside: float, p2p: float, dest: tuple[int, int] | None, needs_input: bool,
                mp_steps: float) -> StepCost:
        host, issue = (0.0, x.host_fwd_s / v) if lane else (x.host_fwd_extra_s / v, 0.0)
        return StepCost((x.fwd_compute_s + inside) / v, 0.0, x.mp_fwd_s / v, p2p, dest, needs_input,
                        host, x.fsdp_fwd_s / v, x.cp_fwd_s / v, mp_steps, issue)

    def backward(x: StageCost, inside: float, p2p: float, dest: tuple[int, int] | None, needs_input: bool,
                 mp_steps: float) -> StepCost:
        host, issue = (0.0, x.host_bwd_s / v) if lane else (x.host_bwd_extra_s / v, 0.0)
        return StepCost((x.bwd_compute_s + inside) / v, x.recompute_s / v, x.mp_bwd_s / v, p2p, dest, needs_input,
                        host, x.fsdp_bwd_s / v, x.cp_bwd_s / v, mp_steps, issue)

    out: StepTable = {}
    for c in range(v):
        vs = c * pp + s  # virtual stage
        last_vs = vs == pp * v - 1
        nxt = ((vs + 1) % pp, (vs + 1) // pp) if not last_vs else None
        prv = ((vs - 1) % pp, (vs - 1) // pp) if vs > 0 else None
        if not own_stage_times:
            out[StepKind.F, c] = forward(slowest_f, slowest_f.p2p_fwd_s, 0.0, nxt, prv is not None, 0.0)
            out[StepKind.B, c] = backward(slowest_b, slowest_b.p2p_bwd_s, 0.0, prv, nxt is not None, 0.0)
            continue
        wrap_p2p = costs.stages[0].p2p_fwd_s  # interleaved: rank pp-1 -> rank 0 (same message)
        p2p_f = st.p2p_fwd_s if s < pp - 1 else (wrap_p2p if nxt is not None else 0.0)
        p2p_b = st.p2p_bwd_s if s > 0 else (wrap_p2p if prv is not None else 0.0)
        out[StepKind.F, c] = forward(st, 0.0, p2p_f, nxt, prv is not None, st.mp_fwd_count * ring / v)
        out[StepKind.B, c] = backward(st, 0.0, p2p_b, prv, nxt is not None, st.mp_bwd_count * ring / v)
    return out


@dataclass(slots=True)
class Tally:
    """Seconds one stage replica spent per activity (its timeline adds up to its end time)."""

    compute: float = 0.0
    mp: float = 0.0
    cp: float = 0.0  # exposed context-parallel ring sends
    host: float = 0.0  # the runtime's host (CPU) time beyond the GPU's work
    pp: float = 0.0
    pp_wait: float = 0.0  # the part of ``pp`` spent waiting for the receiver to post its receive
    dp_allreduce: float = 0.0
    dp_allgather: float = 0.0
    optimizer: float = 0.0
    pipeline_busy: float = 0.0  # compute + MP, CP, FSDP + host + P2P up to the last backward, less the waits
    end: float = 0.0


class Barrier:
    """Fires its event when ``n`` members have arrived; remembers when (:attr:`fired_at`)."""

    __slots__ = ("env", "n", "count", "event", "fired_at")

    def __init__(self, env: simpy.Environment, n: int) -> None:
        self.env, self.n, self.count, self.event = env, n, 0, env.event()
        self.fired_at = 0.0

    def arrive(self) -> None:
        self.count += 1
        if self.count == self.n:
            self.fired_at = self.env.now
            self.event.succeed()


@dataclass(slots=True)
class Overlap:
    """What the interference model needs of a stage's last backward and its DP all-reduces."""

    computing: int = 0  # replicas in their last backward
    lost_s: float = 0.0  # compute seconds the overlapping all-reduces have cost each of them so far


@dataclass(frozen=True, slots=True)
class StageSync:
    """A stage's bucketed DP collectives: a rendezvous of all replicas per bucket and for the all-gather."""

    bucket_ready: tuple[Barrier, ...]
    ar_done: simpy.Event
    ag_ready: Barrier
    ag_done: simpy.Event
    overlap: Overlap = field(default_factory=Overlap)


@dataclass(frozen=True)
class Build:
    """The elaborated model of one run (see module doc)."""

    env: simpy.Environment
    costs: IterationCosts
    opts: SimOptions
    pp: int
    dp: int
    chunks: int
    steps: tuple[tuple[Step, ...], ...]  # per stage
    tables: tuple[StepTable, ...]  # per stage
    routes: Routes | None  # None when no switch needs links
    net: Network[LinkId]
    perturb: RunPerturbation | None
    recorder: Recorder | None
    tallies: dict[tuple[int, int], Tally]
    mailbox: dict[MessageKey, simpy.Event]  # a message's arrival
    posted: dict[MessageKey, simpy.Event]  # a receive posted, for the P2P rendezvous
    drained: Barrier  # every stage replica's last backward has ended
    # The framework's global gradient-norm / overflow all-reduce before the optimizer step:
    # no stage updates before every stage's gradients are reduced.
    synced: Barrier
    finished: Barrier
    dp_sync: dict[int, StageSync]  # per stage, bucketed DP mode only
    mode: SimMode | str = SimMode.REALISTIC  # what SimResult.mode reports
    seed: int = 0
    # tier -> the delay per protocol step a congestion episode adds now: the bound perturbation's own
    # table (sim.jitter.RunJitter.step_latency, switched by its episodes), looked up once here; None:
    # the perturbation has none
    step_latency: Mapping[str, float] | None = None

    @property
    def syncs_gradients(self) -> bool:
        """Gradients are reduced across ranks: more than one rank holds each weight (DP x CP > 1)."""
        return self.costs.parallelism.grad_ranks > 1

    @property
    def rendezvous(self) -> bool:
        """P2P sends wait for the posted receive. This follows Megatron's non-interleaved 1F1B (and
        GPipe) call order; its interleaved schedule exchanges in lock-step, there sends stay eager."""
        return self.opts.p2p_transfers and self.chunks == 1

    def event_count(self) -> int:
        """SimPy events scheduled so far (SimPy keeps no counter; its event ids are a running count)."""
        return int(next(self.env._eid))  # noqa: SLF001 - itertools.count in simpy 4


#: The last routes built: (costs, cluster, chunks, routes); see :func:`routes_for`.
_last_routes: tuple[IterationCosts, ClusterSpec, int, Routes] | None = None


def routes_for(costs: IterationCosts, cluster: ClusterSpec, chunks: int) -> Routes:
    """:func:`sim.routes.build_routes`, remembered for the last (costs, cluster, chunks) by identity.

    A Monte Carlo simulates the same costs on the same cluster again and again; its routes are the
    same every time (both are frozen, and a run only reads its routes: the network interns their
    rate dicts per run), so they are built once, not once per sample.
    """
    global _last_routes
    last = _last_routes
    if last is not None and last[0] is costs and last[1] is cluster and last[2] == chunks:
        return last[3]
    routes = build_routes(costs, cluster, chunks)
    _last_routes = (costs, cluster, chunks, routes)
    return routes


def elaborate(costs: IterationCosts, cluster: ClusterSpec | None, opts: SimOptions, steps: tuple[tuple[Step, ...], ...],
              chunks: int, perturb: AnyPerturbation | None, rng: np.random.Generator,
              recorder: Recorder | None, *, mode: SimMode | str = SimMode.REALISTIC, seed: int = 0) -> Build:
    """Build everything a run needs (see module doc); ``cluster`` is needed only with contention."""
    par = costs.parallelism
    pp, dp = costs.pp, par.dp
    env = simpy.Environment()
    routes = routes_for(costs, cluster, chunks) if opts.contention and cluster is not None else None
    capacities: dict[LinkId, float] = routes.capacities if routes is not None else {}
    if recorder is None:
        net = Network(env, capacities)
    elif recorder.replicas is None or routes is None:
        net = Network(env, capacities, record=True)
    else:
        links: set[LinkId] = set()
        for s, r in recorder.replicas:
            links |= routes.replica_links(s, r)
        net = Network(env, capacities, record=links)
    n = pp * dp
    dp_sync: dict[int, StageSync] = {}
    if opts.bucketed_dp:
        for s, st in enumerate(costs.stages):
            dp_sync[s] = StageSync(tuple(Barrier(env, dp) for _ in st.dp_bucket_s), env.event(), Barrier(env, dp),
                                   env.event())
    bound = bind_perturbation(perturb, rng, par.mp * par.cp) if perturb is not None else None
    return Build(
        env=env, costs=costs, opts=opts, pp=pp, dp=dp, chunks=chunks, steps=steps,
        tables=tuple(step_costs(costs, opts.own_stage_times, st, chunks, opts.host_clock) for st in costs.stages),
        routes=routes, net=net, perturb=bound, step_latency=getattr(bound, "step_latency", None),
        recorder=recorder, tallies={(s, r): Tally() for s in range(pp) for r in range(dp)},
        mailbox={}, posted={}, drained=Barrier(env, n), synced=Barrier(env, n), finished=Barrier(env, n),
        dp_sync=dp_sync, mode=mode, seed=seed,
    )
