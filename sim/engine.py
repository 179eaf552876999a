"""The discrete-event simulation of one training iteration (SimPy).

One process per (stage, DP replica) walks its stage's schedule (:mod:`sim.schedule`);
the MP ranks of a group move in lock-step and are one entity. Messages between stages
are one-shot events in a mailbox keyed by (stage, replica, kind, micro, chunk). All
durations come precomputed from :class:`sim.costs.StageCost`; nothing is predicted here.

Modes (see :class:`SimOptions`; ``compare`` switches the effects on one at a time):

* **ideal** — Eq. 7's assumptions: every forward slot is ``max_fwd_s`` and every backward
  slot ``max_bwd_s`` (the slowest stage's compute, MP syncs, host excess, FSDP and CP time, each
  tallied as itself; the P2P send inside the compute, charged to the sender), no links.
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
  starts when all members have arrived. A step's host time beyond its GPU work is part of the
  step, except on a stage whose host issues its whole schedule ahead (``StageCost.host_ahead``,
  the pipelining runtime's stages): that stage keeps a host clock, and a step starts no earlier
  than its issue starts and ends no earlier than its issue is done. The iteration ends when
  every stage replica has finished.

Exposed communication (``SimResult.exposed``): on the *critical* stage replica (the last
to finish; ties go to the lowest stage, then replica) the seconds its own timeline was
blocked in each kind of communication: MP all-reduces, P2P sends, waiting for its stage's
DP all-reduce after its last backward (beyond the pipeline drain), and the all-gather.
Communication on other stages that delays the critical one appears there as waiting,
which ``compare`` attributes by cause.

Layout: :func:`simulate` is :func:`build` (the elaborated model, :mod:`sim.build`, with the
routes of :mod:`sim.routes`), :func:`run` (the processes of :mod:`sim.processes`) and
:func:`collect` (tallies and the recorder's spans, :mod:`sim.record`, into a :class:`SimResult`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Schedule
from trainsim.sim import processes, symmetry
from trainsim.sim.build import Build, Tally, elaborate
from trainsim.sim.costs import IterationCosts, mfu, model_flops
from trainsim.sim.eq7 import eq7
from trainsim.sim.kinds import SimMode, TrafficKind
from trainsim.sim.options import IDEAL, REALISTIC, SWITCHES, SimOptions, label, options_for
from trainsim.sim.perturb import AnyPerturbation, Perturbation
from trainsim.sim.record import Recorder, Span, SpanLog, recorder_for
from trainsim.sim.schedule import build_schedule
from trainsim.topology import ClusterSpec

__all__ = ["EXPOSED_KINDS", "IDEAL", "REALISTIC", "SWITCHES", "Perturbation", "SimMode", "SimOptions", "SimResult",
           "Span", "TrafficKind", "build", "collect", "run", "simulate"]

EXPOSED_KINDS: tuple[TrafficKind, ...] = tuple(TrafficKind)


@dataclass(frozen=True)
class SimResult:
    iteration_s: float
    eq7_s: float
    sim_wall_s: float  # perf_counter seconds of env.run()
    events: int  # SimPy events processed
    mode: SimMode | str  # SimMode, or "custom:<switches>" when options were given
    exposed: dict[TrafficKind, float]  # see module doc; keys EXPOSED_KINDS (equal to their strings)
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
    spans: Sequence[Span] = ()  # a SpanLog when recorded
    stage_critical: tuple[int, ...] = ()  # per stage, the replica that finished last (ties: the lowest)
    replicas_recorded: int = 0  # stage replicas that have spans

    def components(self) -> dict[str, float]:
        out = {"iteration_s": self.iteration_s, "eq7_s": self.eq7_s, "pipeline_s": self.pipeline_s,
               "bubble_share": self.bubble_share}
        out.update({f"exposed_{k}_s": v for k, v in self.exposed.items()})
        return out


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


def _mode_of(mode: SimMode | str) -> SimMode:
    try:
        return SimMode(mode)
    except ValueError:
        raise ConfigError("simulation.mode", f"unknown mode {mode!r}; expected realistic or ideal") from None


def simulate(
    costs: IterationCosts,
    cluster: ClusterSpec | None,
    *,
    mode: SimMode | str = SimMode.REALISTIC,
    seed: int = 0,
    perturb: AnyPerturbation | None = None,
    record: bool | Collection[tuple[int, int]] = False,
    schedule: Schedule | str | None = None,
    tokens_per_iteration: float | None = None,
    peak_flops: float | None = None,
    options: SimOptions | None = None,
    overlap_dp: bool = False,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Simulate one iteration: :func:`build` the model, :func:`run` it, :func:`collect` the result.

    ``progress``, if given, is called now and then with the simulated seconds reached (a long
    run's progress report); it changes nothing in the run.

    ``options`` overrides ``mode``'s effect switches (used by compare). ``cluster`` may be None
    only when no switch needs links (ideal, or contention off). MFU uses ``peak_flops`` or else
    ``cluster.gpu.peak_flops``. ``record``: False; True (every span in ``SimResult.spans``, every
    link's busy intervals); or a collection of ``(stage, replica)`` pairs: only those replicas'
    tracks, their stages' DP-collective tracks, and the links their own transfers use.
    """
    ctx = build(costs, cluster, mode=mode, seed=seed, perturb=perturb, record=record, schedule=schedule,
                options=options, overlap_dp=overlap_dp)
    # one replica per stage when the others provably cannot differ (sim.symmetry; bit-identical)
    ctx = symmetry.reduce(ctx)
    wall = run(ctx, progress)
    peak = peak_flops if peak_flops is not None else (cluster.gpu.peak_flops if cluster is not None else None)
    return collect(symmetry.expand(ctx), wall, tokens_per_iteration=tokens_per_iteration, peak_flops=peak)


def build(
    costs: IterationCosts,
    cluster: ClusterSpec | None,
    *,
    mode: SimMode | str = SimMode.REALISTIC,
    seed: int = 0,
    perturb: AnyPerturbation | None = None,
    record: bool | Collection[tuple[int, int]] = False,
    schedule: Schedule | str | None = None,
    options: SimOptions | None = None,
    overlap_dp: bool = False,
) -> Build:
    """Check the arguments of :func:`simulate` and elaborate the run (:func:`sim.build.elaborate`)."""
    mode = _mode_of(mode)
    opts = options if options is not None else options_for(mode, overlap_dp)
    if perturb is not None and opts == IDEAL:
        raise ConfigError("simulation.mode", "jitter needs the realistic mode; the ideal mode follows Eq. 7")
    sched, chunks = _schedule_of(costs, schedule)
    par = costs.parallelism
    pp, dp, m = costs.pp, par.dp, costs.micro_batches
    if pp != par.pp:
        raise ConfigError("parallelism.pp", f"costs have {pp} stages but parallelism.pp is {par.pp}")
    steps = tuple(build_schedule(sched, pp, m, s, chunks) for s in range(pp))
    if opts.contention and cluster is None:
        raise ConfigError("cluster", "the realistic simulation needs a cluster")
    return elaborate(costs, cluster, opts, steps, chunks, perturb, np.random.default_rng(seed),
                     recorder_for(record, pp, dp), mode=mode if options is None else label(opts), seed=seed)


#: events between two progress reports (a few milliseconds of a run)
PROGRESS_EVERY = 8192


def run(ctx: Build, progress: Callable[[float], None] | None = None) -> float:
    """Start the processes and run until every stage replica has finished; returns the wall seconds.

    With ``progress``, the run steps through the same events itself, exactly as ``env.run(until=done)``
    does (``env.step`` until the until-event's ``StopSimulation`` callback fires), and reports the
    simulated time every :data:`PROGRESS_EVERY` events.
    """
    processes.start(ctx)
    env, done = ctx.env, ctx.finished.event
    t0 = time.perf_counter()
    if progress is None:
        env.run(until=done)
        return time.perf_counter() - t0
    assert done.callbacks is not None  # not yet processed: the processes have only just started
    done.callbacks.append(simpy.core.StopSimulation.callback)
    try:
        while True:
            for _ in range(PROGRESS_EVERY):
                env.step()
            progress(env.now)
    except simpy.core.StopSimulation:
        progress(env.now)
    return time.perf_counter() - t0


def collect(ctx: Build, wall_s: float, *, tokens_per_iteration: float | None = None,
            peak_flops: float | None = None) -> SimResult:
    """Turn a finished run's tallies (and recorded spans) into its :class:`SimResult`."""
    costs, tallies = ctx.costs, ctx.tallies
    par = costs.parallelism
    iteration = ctx.env.now
    stage_critical = tuple(_last_replica(tallies, s, ctx.dp) for s in range(ctx.pp))
    # the last to finish of the stages' last ones (ties: the lowest stage, then replica)
    critical = max(enumerate(stage_critical), key=lambda k: (tallies[k].end, -k[0]))
    crit = tallies[critical]
    exposed = {TrafficKind.MP: crit.mp, TrafficKind.CP: crit.cp, TrafficKind.PP: crit.pp,
               TrafficKind.DP_ALLREDUCE: crit.dp_allreduce,
               TrafficKind.DP_ALLGATHER: crit.dp_allgather}
    pipe = ctx.drained.fired_at
    busy = sum(t.pipeline_busy for t in tallies.values())
    bubble = 1.0 - busy / (len(tallies) * pipe) if pipe > 0 else 0.0
    if abs(bubble) < 1e-12:  # float rounding of a bubble-free pipeline (pp = 1), not a negative share
        bubble = 0.0
    flops = model_flops(costs, costs.micro_batches, par.mp, par.dp)  # CP included
    tps = tokens_per_iteration / iteration if tokens_per_iteration and iteration > 0 else None
    rec = ctx.recorder
    spans: Sequence[Span] = ()
    if rec is not None:
        _link_spans(ctx, rec, iteration)
        spans = rec.log
    return SimResult(
        iteration_s=iteration, eq7_s=eq7(costs).iteration_s, sim_wall_s=wall_s, events=ctx.event_count(),
        mode=ctx.mode, exposed=exposed, bubble_share=bubble, pipeline_s=pipe, critical=critical,
        model_flops=flops, mfu=mfu(flops, iteration, par.gpus, peak_flops), tokens_per_s=tps, seed=ctx.seed,
        pp=ctx.pp, dp=ctx.dp, breakdown=_breakdown(crit), spans=spans, stage_critical=stage_critical,
        replicas_recorded=rec.replicas_recorded() if rec is not None else 0,
    )


def _last_replica(tallies: dict[tuple[int, int], Tally], stage: int, dp: int) -> int:
    """The replica of ``stage`` that finished last (ties: the lowest)."""
    best = 0
    for r in range(1, dp):
        if tallies[stage, r].end > tallies[stage, best].end:
            best = r
    return best


def _link_spans(ctx: Build, rec: Recorder, iteration: float) -> None:
    """The recorded links' busy intervals as spans (a link still busy at the end is cut there)."""
    log: SpanLog = rec.log
    for link, intervals in ctx.net.busy.items():
        track = log.track_id(str(link))
        for start, end, kind in intervals:
            log.add(track, str(kind), "link", start, iteration if end is None else end)


def _breakdown(t: Tally) -> dict[str, float]:
    """Seconds of the critical stage replica's timeline per activity; ``idle`` is the rest (waiting)."""
    parts = {"compute": t.compute, TrafficKind.MP: t.mp, TrafficKind.CP: t.cp, "host": t.host, TrafficKind.PP: t.pp,
             TrafficKind.DP_ALLREDUCE: t.dp_allreduce, "optimizer": t.optimizer,
             TrafficKind.DP_ALLGATHER: t.dp_allgather}
    parts["idle"] = max(0.0, t.end - sum(parts.values()))
    return parts
