"""Which layout to pick for a scenario's GPU count and global batch (the library half of
``trainsim sweep``).

**Candidates.** Every layout with ``pp * mp * dp * cp`` equal to the scenario's GPU count (cp from
the given degrees, default the scenario's), crossed with sequence parallelism (on, off or both),
micro-batch sizes ``b`` and pipeline schedules (``1f1b``, ``gpipe``, ``interleaved-1f1b[:V]``;
default the scenario's; a one-stage layout once, under the first schedule listed that is not the
interleaved one: without a pipeline they are the same iteration), always at the scenario's global batch:
``micro_batches = G / (b * dp)``
(a layout whose ``b * dp`` does not divide ``G`` is skipped with the reason). Layouts that the
model or the cluster cannot take (heads not divisible by mp, more stages than layers, an
interleaved schedule whose micro-batches are not a multiple of pp, ...) are kept with the reason.

**Evaluation** (every candidate): Eq. 7, the memory estimate against the GPU's memory
(:func:`operators.memory.fit_report`) and the closed-form lower bound of :mod:`sim.bound`
(compute only, every communication free), which no simulation of the layout can beat.

**Pruning.** A layout that does not fit in memory is not simulated (it cannot run): it is ranked
after the others by Eq. 7. With ``top=K`` the layouts that fit are simulated branch-and-bound
style, in the order of their bound (ties: enumeration order): once the next layout's bound
exceeds the K-th best simulated time, no layout left can enter the top K (each one's time is at
least its bound, and the bounds only grow), and they are not simulated (``pruned="bound"``). The K
best are therefore the same as an unpruned sweep's, and each was simulated in full. With ``top``
None every layout that fits is simulated.

**Parallel.** ``jobs > 1`` evaluates and simulates in ``jobs`` forked worker processes on Linux
(like :mod:`scenarios.montecarlo`: the payload is inherited, only indices go out and small result
records come back), elsewhere in a process pool; ``dask`` submits the same tasks to a
``dask.distributed`` scheduler (an address, or ``"local"`` for a local cluster of ``jobs``
workers). Up to ``jobs`` simulations are in flight, submitted in bound order; their results are
taken in that order and the serial pruning rule is applied to each in turn, exactly as the serial
loop would (a layout is submitted while its bound is within the K-th best time known so far, which
is never below the one the serial loop tests it against), and the results of speculative
simulations past the stopping point are dropped. Every layout's result depends on the layout only
(the scenario's seed), so the sweep's answer is the same, bit for bit, for any ``jobs`` and backend.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainsim.operators import ConfigError
from trainsim.operators.spec import Schedule
from trainsim.scenarios.forking import ForkedPool, can_fork
from trainsim.scenarios.schema import Scenario

#: progress units each candidate reports: one when evaluated, one when simulated or pruned
PROGRESS_UNITS_PER_LAYOUT = 2


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(gpus: int, pps: Sequence[int], mps: Sequence[int],
            cps: Sequence[int] = (1,)) -> list[tuple[int, int, int, int]]:
    """Every ``(pp, mp, dp, cp)`` with ``pp * mp * dp * cp == gpus`` from the given pp, mp and cp degrees."""
    return [(pp, mp, gpus // (pp * mp * cp), cp) for cp in cps for pp in pps for mp in mps
            if gpus % (pp * mp * cp) == 0]


def parse_schedules(texts: Sequence[str], default_virtual: int = 2,
                    option: str = "--schedule") -> list[tuple[Schedule, int]]:
    """``["1f1b", "gpipe", "interleaved-1f1b", "interleaved-1f1b:4"]`` -> (schedule, virtual stages).

    A plain ``interleaved-1f1b`` takes ``default_virtual`` chunks per stage. Unknown names and bad
    chunk counts raise :class:`ConfigError` naming ``option``.
    """
    known = ", ".join(s.value for s in Schedule)
    out: list[tuple[Schedule, int]] = []
    for raw in texts:
        text = raw.strip().lower()
        name, _, v_text = text.partition(":")
        try:
            sched = Schedule(name)
        except ValueError:
            raise ConfigError(option, f"unknown schedule {raw.strip()!r}; expected {known} "
                                      "(interleaved-1f1b:V for V chunks per stage)") from None
        if sched is Schedule.INTERLEAVED_1F1B:
            try:
                v = int(v_text) if v_text else default_virtual
            except ValueError:
                raise ConfigError(option, f"expected interleaved-1f1b:V with an integer V, got {raw.strip()!r}") \
                    from None
            if v < 2:
                raise ConfigError(option, f"the interleaved schedule needs at least 2 chunks per stage, got {raw!r}")
        elif v_text:
            raise ConfigError(option, f"only interleaved-1f1b takes :V (chunks per stage), got {raw.strip()!r}")
        else:
            v = 1
        if (sched, v) not in out:
            out.append((sched, v))
    if not out:
        raise ConfigError(option, "expected at least one schedule")
    return out


def schedule_name(schedule: Schedule, virtual_stages: int) -> str:
    return f"{schedule.value}:{virtual_stages}" if schedule is Schedule.INTERLEAVED_1F1B else schedule.value


@dataclass(frozen=True)
class Candidate:
    """One point of the sweep: a layout, its micro-batch size and schedule at the global batch."""

    index: int  # enumeration order (ties in the ranking go to the lower)
    name: str  # layout_name, plus " b=B" and the schedule where those are swept
    pp: int
    mp: int
    dp: int
    cp: int
    sequence_parallel: bool
    micro_batch: int
    micro_batches: int  # 0 when b * dp does not divide the global batch (then skipped)
    schedule: Schedule
    virtual_stages: int

    @property
    def layout(self) -> str:
        return layout_name(self.pp, self.mp, self.dp, self.cp, self.sequence_parallel)

    def scenario(self, base: Scenario, global_batch: int) -> Scenario:
        """The candidate's scenario (raises :class:`ConfigError` if the model or schema refuse it)."""
        if self.micro_batches == 0:
            raise ConfigError("parallelism.dp", f"dp {self.dp} does not divide the global batch {global_batch} "
                                                f"at micro_batch {self.micro_batch}")
        par = dataclasses.replace(base.parallelism, pp=self.pp, mp=self.mp, dp=self.dp, cp=self.cp,
                                  sequence_parallel=self.sequence_parallel, schedule=self.schedule,
                                  virtual_stages=self.virtual_stages)
        training = dataclasses.replace(base.training, micro_batch=self.micro_batch,
                                       micro_batches=self.micro_batches)
        return dataclasses.replace(base, parallelism=par, training=training, name=f"{base.name} {self.name}")


def global_batch_of(base: Scenario) -> int:
    """Sequences per optimizer step: ``micro_batch * micro_batches * dp`` (kept by every candidate)."""
    tr = base.training
    return tr.micro_batch * tr.micro_batches * base.parallelism.dp


def candidates(base: Scenario, *, pps: Sequence[int] | None = None, mps: Sequence[int] | None = None,
               cps: Sequence[int] | None = None, sps: Sequence[bool] | None = None,
               micro_batches: Sequence[int] | None = None,
               schedules: Sequence[tuple[Schedule, int]] | None = None) -> list[Candidate]:
    """The sweep's candidates in enumeration order (module doc). A micro-batch size that does not
    divide the global batch raises :class:`ConfigError` naming ``--micro-batch``."""
    gpus = base.gpus
    par, tr = base.parallelism, base.training
    g = global_batch_of(base)
    bs = [tr.micro_batch] if micro_batches is None else list(dict.fromkeys(micro_batches))
    for b in bs:
        if b < 1 or g % b:
            raise ConfigError("--micro-batch", f"micro-batch size {b} does not divide the global batch of {g} "
                                               f"sequences ({tr.micro_batch} x {tr.micro_batches} x dp {par.dp})")
    scheds = [(par.schedule, par.virtual_stages)] if schedules is None else list(dict.fromkeys(schedules))
    sp_choices = [par.sequence_parallel] if sps is None else list(dict.fromkeys(sps))
    grid = layouts(gpus, divisors(gpus) if pps is None else pps, divisors(gpus) if mps is None else mps,
                   [par.cp] if cps is None else cps)
    # one stage has no pipeline to schedule: it is swept once, under the first schedule listed that is not
    # the interleaved one (which needs pp > 1), or the first
    one_stage = next((sv for sv in scheds if sv[0] is not Schedule.INTERLEAVED_1F1B), scheds[0])
    out: list[Candidate] = []
    for (pp, mp, dp, cp), sp, b, (sched, v) in itertools.product(grid, sp_choices, bs, scheds):
        if sp and mp == 1 and False in sp_choices:
            continue  # sequence parallelism over one MP rank is the layout without it
        if pp == 1 and (sched, v) != one_stage:
            continue  # the same layout under another schedule: the same iteration
        name = layout_name(pp, mp, dp, cp, sp and mp > 1)
        if len(bs) > 1:
            name += f" b={b}"
        if len(scheds) > 1:
            name += f" {schedule_name(sched, v)}"
        m = g // (b * dp) if g % (b * dp) == 0 else 0
        out.append(Candidate(len(out), name, pp, mp, dp, cp, sp, b, m, sched, v))
    return out


@dataclass(frozen=True)
class SweepRow:
    layout: str
    pp: int
    mp: int
    dp: int
    cp: int
    sequence_parallel: bool
    micro_batches: int
    simulated_s: float
    eq7_s: float
    tokens_per_s: float
    mfu: float
    bubble_share: float
    memory_gib_per_gpu: float
    fits_memory: bool
    simulated: bool = True  # False: not simulated (see ``pruned``); simulated_s is then Eq. 7's
    micro_batch: int = 1
    schedule: str = "1f1b"  # schedule_name: "interleaved-1f1b:V" with V chunks per stage
    bound_s: float = 0.0  # the closed-form lower bound (sim.bound): simulated_s >= bound_s when simulated
    pruned: str | None = None  # None (simulated), "memory" (does not fit) or "bound" (cannot reach the top K)
    name: str = ""  # the candidate's name (layout, and b= / schedule where those are swept)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Skipped:
    layout: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "reason": self.reason}


@dataclass(frozen=True)
class SweepResult:
    """Layouts ranked: the simulated ones by simulated time, then those pruned by the bound (by bound),
    then those that do not fit in memory (by Eq. 7)."""

    scenario: str
    gpus: int
    global_batch: int
    gpu_mem_gib: float
    rows: tuple[SweepRow, ...]
    skipped: tuple[Skipped, ...]
    top: int | None = None  # K of the branch and bound; None: every layout that fits was simulated

    @property
    def best(self) -> SweepRow | None:
        return self.rows[0] if self.rows and self.rows[0].simulated else None

    @property
    def simulated(self) -> int:
        return sum(r.simulated for r in self.rows)

    @property
    def pruned_memory(self) -> int:
        return sum(r.pruned == "memory" for r in self.rows)

    @property
    def pruned_bound(self) -> int:
        return sum(r.pruned == "bound" for r in self.rows)

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        rows = self.rows if top is None else self.rows[:top]
        return {"scenario": self.scenario, "gpus": self.gpus, "global_batch": self.global_batch,
                "layouts_tried": len(self.rows) + len(self.skipped), "layouts_ranked": len(self.rows),
                "simulated": self.simulated, "pruned": {"memory": self.pruned_memory, "bound": self.pruned_bound},
                "top": self.top, "layouts": [r.to_dict() for r in rows],
                "skipped": [s.to_dict() for s in self.skipped]}


# -- the work of one candidate (run in the caller's process, a forked worker or a dask worker) ------------------

@dataclass(frozen=True)
class _Evaluated:
    eq7_s: float
    bound_s: float
    memory_gib: float
    fits: bool
    tokens_per_s: float  # at Eq. 7's time
    mfu: float  # at Eq. 7's time


@dataclass(frozen=True)
class _Simulated:
    iteration_s: float
    tokens_per_s: float
    mfu: float
    bubble_share: float


@dataclass(frozen=True)
class _Job:
    """What every task needs besides its candidate (inherited by forked workers, shipped to dask once)."""

    base: Scenario
    global_batch: int
    reference_data: str | None
    cache_dir: str | None
    check: Callable[[Scenario], None] | None


def _predict(job: _Job, c: Candidate) -> Any:
    from trainsim.operators.spec import check_model_fits
    from trainsim.scenarios.compose import predict
    from trainsim.sim.schedule import build_schedule

    sc = c.scenario(job.base, job.global_batch)
    check_model_fits(sc.model, sc.parallelism)
    par = sc.parallelism  # the schedule's own conditions (interleaved: m a multiple of pp), as the simulation checks
    build_schedule(par.schedule, par.pp, sc.training.micro_batches, 0,
                   par.virtual_stages if par.schedule is Schedule.INTERLEAVED_1F1B else 1)
    if job.check is not None:
        job.check(sc)
    # a ranking of layouts shows no host band: not priced (two more cost builds per layout)
    return predict(sc, reference_data=job.reference_data, cache_dir=job.cache_dir, band=False)


def evaluate(job: _Job, c: Candidate) -> _Evaluated | str:
    """Eq. 7, memory and the lower bound of one candidate; the reason as a string if it cannot run."""
    from trainsim.sim.bound import lower_bound

    try:
        pred = _predict(job, c)
    except ConfigError as e:
        return str(e)
    fit = pred.memory_fit
    t = pred.eq7.iteration_s
    bound = lower_bound(pred.costs, pred.scenario.overlap_grad_reduce)
    return _Evaluated(t, bound, fit.needed_gib, fit.fits, pred.tokens_per_s(t), pred.mfu(t))


def simulate_one(job: _Job, c: Candidate) -> _Simulated:
    """The full simulation of one candidate (as ``trainsim run`` simulates its scenario)."""
    from trainsim.scenarios.compose import simulate_prediction

    sim = simulate_prediction(_predict(job, c))
    return _Simulated(sim.iteration_s, sim.tokens_per_s or 0.0, sim.mfu or 0.0, sim.bubble_share)


# -- executors: in process, forked workers, dask ----------------------------------------------------------------

class _Serial:
    def __init__(self, job: _Job, cands: Sequence[Candidate]) -> None:
        self.job, self.cands = job, cands

    def map(self, fn: Callable[[_Job, Candidate], Any], idx: Sequence[int]) -> Any:
        for i in idx:
            yield fn(self.job, self.cands[i])

    def submit(self, fn: Callable[[_Job, Candidate], Any], i: int) -> Any:
        return _Lazy(fn, self.job, self.cands[i])  # run when its result is asked for: nothing speculative

    def close(self) -> None:
        pass


class _Lazy:
    def __init__(self, fn: Callable[[_Job, Candidate], Any], job: _Job, c: Candidate) -> None:
        self.fn, self.job, self.c = fn, job, c

    def result(self) -> Any:
        return self.fn(self.job, self.c)

    def cancel(self) -> bool:
        return True


def _on_candidate(fn: Callable[[_Job, Candidate], Any], payload: tuple[_Job, Sequence[Candidate]], i: int) -> Any:
    """``fn`` on candidate ``i`` of a forked worker's inherited (job, candidates)."""
    job, cands = payload
    return fn(job, cands[i])


class _Forked:
    """``jobs`` forked processes that inherit the job and the candidates (only indices travel:
    :class:`scenarios.forking.ForkedPool`)."""

    def __init__(self, job: _Job, cands: Sequence[Candidate], jobs: int) -> None:
        self.jobs = jobs
        self.workers = ForkedPool((job, cands), jobs)

    def map(self, fn: Callable[[_Job, Candidate], Any], idx: Sequence[int]) -> Any:
        chunk = max(1, min(16, len(idx) // (4 * self.jobs)))
        return self.workers.map(functools.partial(_on_candidate, fn), idx, chunksize=chunk)

    def submit(self, fn: Callable[[_Job, Candidate], Any], i: int) -> Any:
        return self.workers.submit(functools.partial(_on_candidate, fn), i)

    def close(self) -> None:
        self.workers.close()


class _Spawned:
    """Where fork is not available: a process pool that receives the job with each task."""

    def __init__(self, job: _Job, cands: Sequence[Candidate], jobs: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.job, self.cands, self.jobs = job, cands, jobs
        self.ex = ProcessPoolExecutor(max_workers=jobs)

    def map(self, fn: Callable[[_Job, Candidate], Any], idx: Sequence[int]) -> Any:
        return self.ex.map(fn, [self.job] * len(idx), [self.cands[i] for i in idx])

    def submit(self, fn: Callable[[_Job, Candidate], Any], i: int) -> Any:
        return self.ex.submit(fn, self.job, self.cands[i])

    def close(self) -> None:
        self.ex.shutdown(wait=True, cancel_futures=True)


class _Dask:
    """Tasks on a ``dask.distributed`` scheduler (``"local"``: a local cluster of ``jobs`` workers)."""

    def __init__(self, job: _Job, cands: Sequence[Candidate], jobs: int, address: Any) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ConfigError("--dask", "needs the optional dependency: pip install 'trainsim[dask]'") from None
        self.cands = cands
        self.cluster: Any = None
        self.own = not isinstance(address, Client)
        try:
            if not self.own:
                self.client = address
            elif address == "local":
                self.cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                            dashboard_address=None)
                self.client = Client(self.cluster)
            elif not address:
                raise ConfigError("--dask", "expected a scheduler address (tcp://host:8786) or 'local'")
            else:
                self.client = Client(address, timeout=30)
        except OSError as e:
            raise ConfigError("--dask", f"cannot reach the dask scheduler {address!r}: {e}") from None
        self.width = max(1, sum(self.client.nthreads().values()))
        self.job = self.client.scatter(job, broadcast=True)  # the scenario travels once

    def map(self, fn: Callable[[_Job, Candidate], Any], idx: Sequence[int]) -> Any:
        futures = [self.client.submit(fn, self.job, self.cands[i], pure=False) for i in idx]
        for f in futures:  # in submission order
            yield f.result()

    def submit(self, fn: Callable[[_Job, Candidate], Any], i: int) -> Any:
        return self.client.submit(fn, self.job, self.cands[i], pure=False)

    def close(self) -> None:
        if self.own:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


def _executor(job: _Job, cands: Sequence[Candidate], jobs: int, dask: Any) -> Any:
    if dask is not None:
        return _Dask(job, cands, jobs, dask)
    if jobs == 1:
        return _Serial(job, cands)
    return _Forked(job, cands, jobs) if can_fork() else _Spawned(job, cands, jobs)


def _no_progress(n: int) -> None:
    pass


def sweep_layouts(base: Scenario, *, pps: Sequence[int] | None = None, mps: Sequence[int] | None = None,
                  cps: Sequence[int] | None = None, sps: Sequence[bool] | None = None,
                  micro_batches: Sequence[int] | None = None,
                  schedules: Sequence[tuple[Schedule, int]] | None = None,
                  top: int | None = None, jobs: int = 1, dask: Any = None,
                  reference_data: str | None = None, cache_dir: str | None = None,
                  progress: Callable[[int], None] | None = None,
                  check: Callable[[Scenario], None] | None = None) -> SweepResult:
    """Evaluate every candidate, prune, simulate and rank (module doc).

    ``top``: K of the branch and bound (None: simulate every layout that fits). ``jobs``: worker
    processes; ``dask``: a scheduler address, ``"local"`` or a ``distributed.Client``.
    ``check`` is called on every candidate scenario before it is built (the resource guard); a
    :class:`ConfigError` it raises skips that layout with its message as the reason. ``progress(n)``
    reports :data:`PROGRESS_UNITS_PER_LAYOUT` units per candidate of :func:`candidates`.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError("--jobs", f"must be a positive integer, got {jobs!r}")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError("--top", f"must be a positive integer, got {top!r}")
    from trainsim.scenarios.compose import duration_model

    done = progress or _no_progress
    cands = candidates(base, pps=pps, mps=mps, cps=cps, sps=sps, micro_batches=micro_batches, schedules=schedules)
    g = global_batch_of(base)
    duration_model(base, reference_data, cache_dir)  # the profile loaded (or its error raised) before any fork
    job = _Job(base, g, reference_data, cache_dir, check)
    ex = _executor(job, cands, jobs, dask)
    try:
        evals: list[_Evaluated | str] = []
        for e in ex.map(evaluate, range(len(cands))):
            evals.append(e)
            done(1)
        skipped = [Skipped(c.name, e) for c, e in zip(cands, evals, strict=True) if isinstance(e, str)]
        ok = [(c, e) for c, e in zip(cands, evals, strict=True) if isinstance(e, _Evaluated)]
        fitting = sorted((ce for ce in ok if ce[1].fits), key=lambda ce: (ce[1].bound_s, ce[0].index))
        done(len(cands) - len(fitting))  # skipped or not fitting: decided
        sims = _branch_and_bound(ex, fitting, top, getattr(ex, "width", jobs), done)
    finally:
        ex.close()
    done(len(fitting) - len(sims))  # pruned by the bound
    order = {None: 0, "bound": 1, "memory": 2}
    ranked = sorted(((_row(c, e, sims.get(c.index)), c.index) for c, e in ok),
                    key=lambda ri: (order[ri[0].pruned], ri[0].bound_s if ri[0].pruned == "bound"
                                    else ri[0].simulated_s, ri[1]))
    return SweepResult(base.name, base.gpus, g, base.cluster.gpu.mem_gib, tuple(r for r, _ in ranked),
                       tuple(skipped), top)


def _branch_and_bound(ex: Any, fitting: Sequence[tuple[Candidate, _Evaluated]], top: int | None, width: int,
                      done: Callable[[int], None]) -> dict[int, _Simulated]:
    """Simulate the fitting candidates in bound order until the next bound exceeds the K-th best time.

    Up to ``width`` simulations are in flight; results are taken in bound order and the serial rule
    (simulate the next layout unless its bound exceeds the K-th best time so far) is applied to each
    in that order, so the accepted set is the serial loop's whatever the width. A layout is submitted
    while its bound is within the K-th best time known so far, which can only be larger than the one
    the serial loop would test it against: speculation may simulate a layout the serial loop would
    not (its result is dropped), never skip one it would simulate.
    """
    import heapq
    from collections import deque

    sims: dict[int, _Simulated] = {}
    best: list[float] = []  # max-heap (negated) of the K best simulated times

    def kth() -> float:
        return -best[0] if top is not None and len(best) >= top else math.inf

    inflight: deque[tuple[int, Any]] = deque()
    nxt = 0
    try:
        while True:
            while len(inflight) < max(1, width) and nxt < len(fitting) and fitting[nxt][1].bound_s <= kth():
                inflight.append((nxt, ex.submit(simulate_one, fitting[nxt][0].index)))
                nxt += 1
            if not inflight:
                return sims
            pos, fut = inflight.popleft()
            if fitting[pos][1].bound_s > kth():  # the serial loop stops here
                return sims
            res = fut.result()
            sims[fitting[pos][0].index] = res
            if top is not None:
                if len(best) < top:
                    heapq.heappush(best, -res.iteration_s)
                elif res.iteration_s < -best[0]:
                    heapq.heapreplace(best, -res.iteration_s)
            done(1)
    finally:
        for _, fut in inflight:
            fut.cancel()


def _row(c: Candidate, e: _Evaluated, sim: _Simulated | None) -> SweepRow:
    pruned = None if sim is not None else ("memory" if not e.fits else "bound")
    return SweepRow(
        layout=c.layout, pp=c.pp, mp=c.mp, dp=c.dp, cp=c.cp, sequence_parallel=c.sequence_parallel and c.mp > 1,
        micro_batches=c.micro_batches, simulated_s=sim.iteration_s if sim is not None else e.eq7_s, eq7_s=e.eq7_s,
        tokens_per_s=sim.tokens_per_s if sim is not None else e.tokens_per_s,
        mfu=sim.mfu if sim is not None else e.mfu, bubble_share=sim.bubble_share if sim is not None else 0.0,
        memory_gib_per_gpu=e.memory_gib, fits_memory=e.fits, simulated=sim is not None, micro_batch=c.micro_batch,
        schedule=schedule_name(c.schedule, c.virtual_stages), bound_s=e.bound_s, pruned=pruned, name=c.name,
    )


def layout_name(pp: int, mp: int, dp: int, cp: int = 1, sp: bool = False) -> str:
    """``pp-mp-dp``, with ``-cpN`` and ``-sp`` where used."""
    return f"{pp}-{mp}-{dp}" + (f"-cp{cp}" if cp > 1 else "") + ("-sp" if sp else "")


def count_layouts(gpus: int, pps: Sequence[int] | None, mps: Sequence[int] | None,
                  cps: Sequence[int] | None = None, sps: Sequence[bool] | None = None) -> int:
    return len(layouts(gpus, divisors(gpus) if pps is None else pps, divisors(gpus) if mps is None else mps,
                       cps or (1,))) * (len(set(sps)) if sps else 1)
