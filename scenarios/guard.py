"""The resource guard: refuse, before anything is built, a run that would exhaust time or memory.

:func:`check_resources` is pure arithmetic on a loaded :class:`~trainsim.scenarios.schema.Scenario`
(no plans, costs, topology or SimPy objects are built). It estimates

* the **SimPy events** of one simulated iteration: every stage replica (``pp * dp`` of them; the
  ``mp`` ranks of a group move in lock-step and are one process) walks ``2 * m * chunks`` schedule
  steps of about :data:`EVENTS_PER_STEP` events each (compute timeout, MP transfer, P2P rendezvous
  and transfer, mailbox), plus a few events per stage replica for the gradient sync and update, plus
  :data:`EVENTS_PER_BUCKET` per DP gradient bucket of every stage;
* the **memory**: what ``predict`` builds (rank groups per GPU, one entry per gradient bucket in the
  stage costs) and, for a simulation, the link model (per GPU), the processes and routes (per stage
  replica), the schedules (per step of a stage) and the per-link rates of every DP bucket (which
  grow with the GPUs of a stage's DP groups).

The constants were measured with ``tracemalloc`` / peak RSS on GPT-20B (dgx-h100) while scaling
``parallelism.dp``, ``model.hidden`` and ``training.micro_batches`` (see the module's tests); they
are deliberately rounded up. A run above a bound raises :class:`ConfigError` naming the option
that raises the bound (``--max-events``, ``--max-memory``) and what drives the estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainsim.operators.errors import ConfigError
from trainsim.operators.partition import partition_encoders, stage_params, stage_role
from trainsim.operators.spec import MAX_GPUS

#: the default of ``--max-events``: 25x the bundled 16,384-GPU scenario (about 2e6 events, 17 s);
#: at 1e5 to 2e5 events per second a run at the bound takes several minutes
DEFAULT_MAX_EVENTS = 50_000_000
#: the memory bound (GiB) at the default ``--max-events``; it scales with ``--max-events``, so that
#: one option raises both (a run's memory grows with what it simulates)
DEFAULT_MAX_MEMORY_GIB = 8.0

EVENTS_PER_STEP = 8  # an upper bound: measured 5.4 (GPT-20B, PP4 DP4) to 5.8 (16k GPUs) per forward or backward
# step since the engine's transfers complete on their own timeouts (2026-11-26; 6.8 to 7.6 before)
EVENTS_PER_REPLICA = 12  # drain, gradient-sync barrier, optimizer, all-gather, finish
EVENTS_PER_BUCKET = 4  # measured 3.0 per DP all-reduce bucket, independent of dp

BASE_BYTES = 64 << 20  # interpreter, numpy, simpy, a fitted profile
PREDICT_BYTES_PER_GPU = 100  # rank groups of the placement (measured ~50)
PREDICT_BYTES_PER_BUCKET = 200  # bucket sizes, collectives and seconds in the stage costs (measured ~140)
SIM_BYTES_PER_GPU = 400  # link ids and capacities of the link model
SIM_BYTES_PER_REPLICA = 20 << 10  # process, routes, tallies, mailbox (measured ~15 KiB)
SIM_BYTES_PER_STEP = 150  # schedule steps, per stage (measured ~112)
SIM_BYTES_PER_BUCKET = 1024  # rendezvous and events per DP bucket (measured ~700) ...
SIM_BYTES_PER_BUCKET_GPU = 80  # ... plus the per-link rates of its DP groups (measured ~56 per GPU)
RECORD_BYTES_PER_EVENT = 100  # spans kept for a trace or a timeline plot


@dataclass(frozen=True)
class ResourceEstimate:
    """What one run of a scenario would cost, before anything is built."""

    gpus: int
    stage_replicas: int  # pp * dp simulated processes
    steps: int  # forward and backward steps per stage replica (2 * m * chunks)
    buckets: int  # DP all-reduce buckets over all stages (0 when dp == 1)
    gather_buckets: int  # ZeRO all-gather buckets over all stages, in the stage costs only
    events: int  # SimPy events of all runs
    predict_bytes: int
    simulate_bytes: int  # includes predict_bytes; 0 when nothing is simulated

    @property
    def memory_bytes(self) -> int:
        return max(self.predict_bytes, self.simulate_bytes)


def _g(x: float) -> str:
    return f"{x:,}" if x < 1e6 else f"{x:.3g}".replace("e+0", "e").replace("e+", "e")


def _gib(b: float) -> str:
    return f"{b / 2**30:,.1f} GiB" if b >= 2**30 / 10 else f"{b / 2**20:,.0f} MiB"


def estimate(scenario, *, simulate: bool = True, record: bool = False, runs: int = 1) -> ResourceEstimate:
    """The estimate behind :func:`check_resources` (raises only ``ConfigError``)."""
    model, training, par = scenario.model, scenario.training, scenario.parallelism
    pp, mp, dp = par.pp, par.mp, par.dp
    chunks = par.virtual_stages
    gpus = pp * mp * dp
    m = training.micro_batches
    steps = 2 * m * chunks
    replicas = pp * dp
    counts = partition_encoders(model.layers, pp)  # as build_stage_plans; ConfigError if more stages than layers
    buckets = gather = 0
    if dp > 1:
        for s, n in enumerate(counts):
            params = stage_params(model, mp, stage_role(s, len(counts)), n)
            buckets += math.ceil(params / training.dp_bucket)
            if training.zero_stage >= 1:
                gather += math.ceil(params // dp / training.dp_bucket)
    events = runs * (replicas * (steps * EVENTS_PER_STEP + EVENTS_PER_REPLICA) + buckets * EVENTS_PER_BUCKET)
    predict_bytes = (BASE_BYTES + gpus * PREDICT_BYTES_PER_GPU
                     + (buckets + gather) * PREDICT_BYTES_PER_BUCKET)
    sim_bytes = 0
    if simulate:
        sim_bytes = (predict_bytes + gpus * SIM_BYTES_PER_GPU + replicas * SIM_BYTES_PER_REPLICA
                     + pp * steps * SIM_BYTES_PER_STEP
                     + buckets * (SIM_BYTES_PER_BUCKET + SIM_BYTES_PER_BUCKET_GPU * dp * mp))
        if record:
            sim_bytes += events // runs * RECORD_BYTES_PER_EVENT
    return ResourceEstimate(gpus=gpus, stage_replicas=replicas, steps=steps, buckets=buckets, gather_buckets=gather,
                            events=events if simulate else 0, predict_bytes=predict_bytes,
                            simulate_bytes=sim_bytes)


def check_resources(scenario, *, max_events: int = DEFAULT_MAX_EVENTS, max_gpus: int = MAX_GPUS,
                    max_memory_gib: float | None = None, simulate: bool = True, record: bool = False,
                    runs: int = 1) -> ResourceEstimate:
    """Refuse a run of ``scenario`` that would exceed a bound; return the estimate otherwise.

    ``simulate=False`` (``predict``): only what the closed form builds is checked (per-GPU rank
    groups, per-bucket stage costs); no event bound applies. ``record``: spans are kept (a trace
    or a timeline plot). ``runs``: how many simulations of this scenario the command runs
    (``compare`` runs one per cause, ``jitter`` one per sample); their events add up, their
    memory does not. ``max_memory_gib``: default :data:`DEFAULT_MAX_MEMORY_GIB` times
    ``max_events / DEFAULT_MAX_EVENTS`` (at least the default), so ``--max-events`` raises both.
    Raises :class:`ConfigError` naming the option that raises the bound.
    """
    from trainsim.operators.errors import check_number

    check_number("--max-events", max_events, integer=True, minimum=1)
    check_number("--max-gpus", max_gpus, integer=True, minimum=1)
    if max_memory_gib is None:
        max_memory_gib = DEFAULT_MAX_MEMORY_GIB * max(1.0, max_events / DEFAULT_MAX_EVENTS)
        option = "--max-events"
    else:
        check_number("max_memory_gib", max_memory_gib, positive=True)
        option = "max_memory_gib"
    check_number("runs", runs, integer=True, minimum=1)
    par = scenario.parallelism
    gpus = par.pp * par.mp * par.dp
    if gpus > max_gpus:
        raise ConfigError("parallelism", f"pp*mp*dp = {gpus:,} GPUs; the bound is {max_gpus:,} GPUs")
    est = estimate(scenario, simulate=simulate, record=record, runs=runs)
    if simulate and est.events > max_events:
        parts = [f"{est.stage_replicas:,} stage replicas (pp {par.pp} x dp {par.dp:,}) x {est.steps:,} steps"]
        if est.buckets:
            parts.append(f"{est.buckets:,} DP gradient buckets")
        if runs > 1:
            parts.append(f"x {runs:,} runs")
        raise ConfigError("--max-events", f"this run would simulate about {_g(est.events)} events "
                                          f"({', '.join(parts)}); the bound is {_g(max_events)}; "
                                          f"raise it with --max-events")
    limit = max_memory_gib * 2**30
    if est.memory_bytes > limit:
        drivers = []
        if est.buckets + est.gather_buckets > 10_000:
            drivers.append(f"{est.buckets + est.gather_buckets:,} DP gradient buckets of training.dp_bucket = "
                           f"{scenario.training.dp_bucket:,} entries")
        if est.gpus > 100_000:
            drivers.append(f"{est.gpus:,} GPUs")
        if simulate and est.stage_replicas > 10_000:
            drivers.append(f"{est.stage_replicas:,} stage replicas")
        if simulate and par.pp * est.steps > 1_000_000:
            drivers.append(f"{par.pp} stages x {est.steps:,} steps")
        what = "this run would need" if simulate else "pricing this layout would need"
        hint = f"raise training.dp_bucket or {option}" if est.buckets + est.gather_buckets > 10_000 \
            else f"raise it with {option}"
        scale = f" ({DEFAULT_MAX_MEMORY_GIB:g} GiB per {_g(DEFAULT_MAX_EVENTS)} of --max-events)" \
            if option == "--max-events" else ""
        raise ConfigError(option, f"{what} about {_gib(est.memory_bytes)}"
                                  f"{' (' + ', '.join(drivers) + ')' if drivers else ''}; "
                                  f"the memory bound is {max_memory_gib:g} GiB{scale}; {hint}")
    return est
