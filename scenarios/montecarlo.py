"""Monte Carlo of jittered iterations: seeded samples, run serially, with joblib or on Dask.

Sample ``i`` of a run with seed ``S`` is simulated with the integer seed drawn from
``numpy.random.SeedSequence(S, spawn_key=(i,))`` (the i-th child of ``SeedSequence(S).spawn``),
so a sample depends on (S, i) only: the same samples, bit for bit, whatever ``jobs``, the
backend or the chunking is.

Work is shipped in chunks of consecutive samples (the stage costs travel once per chunk,
not once per sample). ``backend="joblib"`` uses loky worker processes; on Linux, forked
worker processes instead (:func:`_execute_forked`: they inherit the imported modules and the
costs, so they start in milliseconds where a loky worker takes a second or two to import
everything; the samples are the same). ``backend="dask"`` submits the chunks to a
``dask.distributed`` scheduler.

Where the variance comes from (``per_kind_share``) is measured by ablation, on request
(``share_samples``; ``trainsim jitter --shares K``): the first ``share_samples`` seeds are re-run
with only one source of jitter switched on (MP, PP or DP transfer noise, compute noise and
stragglers, link congestion). A source's *added time* is its mean iteration time minus the
deterministic (jitter-off) simulation, and its share is that divided by the all-on added time on
the same seeds. Sources interact (a congested link slows a noisy transfer further; the pipeline
takes the max of delays), so the shares need not sum to one; ``share_residual = 1 - sum(shares)``
says by how much. Congestion is its own source: an episode slows every kind of traffic on its link.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.forking import ForkedPool, can_fork
from trainsim.scenarios.progress import Progress, ProgressCallback
from trainsim.sim.costs import IterationCosts
from trainsim.sim.jitter import Jitter
from trainsim.topology import ClusterSpec

BACKENDS = ("joblib", "dask")
EXPOSED_KINDS = ("mp", "pp", "dp_allreduce", "dp_allgather")
#: Seeds re-run per source for the shares when none is asked for: none. The ablation costs
#: K x (its sources) simulations on top of the n asked for (200 seeds of the Vista presets' four
#: sources: 1,800 simulations for -n 1000), so it runs only where a user asks for it.
DEFAULT_SHARE_SAMPLES = 0


def child_seeds(seed: int, n: int, start: int = 0) -> list[int]:
    """Integer seeds of samples ``start .. start + n - 1`` (see module doc)."""
    return [int(np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1, np.uint64)[0])
            for i in range(start, start + n)]


def _run_chunk(simulate: Callable[..., Any], costs: IterationCosts, cluster: ClusterSpec,
               jitter: Jitter | None, seeds: Sequence[int], mode: str) -> np.ndarray:
    """Rows of (iteration_s, exposed mp, pp, dp_allreduce, dp_allgather) for each seed."""
    out = np.full((len(seeds), 1 + len(EXPOSED_KINDS)), np.nan)
    for i, s in enumerate(seeds):
        r = simulate(costs, cluster, mode=mode, seed=s, perturb=jitter)
        out[i, 0] = r.iteration_s
        exposed = getattr(r, "exposed", None) or {}
        for j, k in enumerate(EXPOSED_KINDS):
            if k in exposed:
                out[i, 1 + j] = exposed[k]
    return out


@dataclass(frozen=True)
class MonteCarloResult:
    samples_s: np.ndarray  # iteration time of each sample, in sample order
    deterministic_s: float  # the same simulation with jitter off
    seed: int
    jitter: Jitter | None
    exposed_mean_s: dict[str, float]  # mean exposed communication per kind over the samples
    per_kind_share: dict[str, float] = field(default_factory=dict)  # source -> share of the added time
    added_s: dict[str, float] = field(default_factory=dict)  # source (and "all") -> mean added seconds
    share_samples: int = 0
    share_residual: float = math.nan

    @property
    def n(self) -> int:
        return int(self.samples_s.size)

    @property
    def min_s(self) -> float:
        return float(self.samples_s.min())

    @property
    def mean_s(self) -> float:
        lo, hi = self.samples_s.min(), self.samples_s.max()
        # equal samples (jitter off): their value, not a rounded sum of them
        return float(lo) if lo == hi else float(self.samples_s.mean())

    @property
    def p50_s(self) -> float:
        return float(np.percentile(self.samples_s, 50))

    @property
    def p95_s(self) -> float:
        return float(np.percentile(self.samples_s, 95))

    @property
    def max_s(self) -> float:
        return float(self.samples_s.max())

    @property
    def avg_over_min_pct(self) -> float:
        """The paper's statistic: how much the mean iteration exceeds the fastest, in percent."""
        return 100.0 * (self.mean_s / self.min_s - 1.0)

    def to_json(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if not math.isfinite(x) else x

        return {
            "n": self.n,
            "seed": self.seed,
            "jitter": self.jitter.to_mapping() if self.jitter else None,
            "jitter_preset": self.jitter.preset if self.jitter else None,
            "deterministic_s": self.deterministic_s,
            "min_s": self.min_s,
            "mean_s": self.mean_s,
            "p50_s": self.p50_s,
            "p95_s": self.p95_s,
            "max_s": self.max_s,
            "avg_over_min_pct": self.avg_over_min_pct,
            "exposed_mean_s": {k: clean(v) for k, v in self.exposed_mean_s.items()},
            "shares": dict(self.per_kind_share),
            "added_s": dict(self.added_s),
            "share_samples": self.share_samples,
            "share_residual": clean(self.share_residual),
            "samples_s": self.samples_s.tolist(),
        }


def _chunks(seeds: list[int], jobs: int) -> list[list[int]]:
    # A few chunks per worker balance the load; more would ship the costs more often.
    size = max(1, min(256, math.ceil(len(seeds) / (4 * max(jobs, 1)))))
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def _no_progress(n: int) -> None:
    pass


def _execute(tasks: list[tuple[Jitter | None, list[int]]], *, simulate: Callable[..., Any], costs: IterationCosts,
             cluster: ClusterSpec, mode: str, jobs: int, backend: str, scheduler: Any,
             progress: ProgressCallback | None) -> list[np.ndarray]:
    """Run (jitter, seeds) tasks; results in task order. ``progress(k)`` after each finished chunk of k seeds."""
    done = progress or _no_progress
    if backend == "dask":
        return _execute_dask(tasks, simulate, costs, cluster, mode, scheduler, done)
    if jobs == 1:
        out = []
        for jit, seeds in tasks:
            out.append(_run_chunk(simulate, costs, cluster, jit, seeds, mode))
            done(len(seeds))
        return out
    if can_fork():
        return _execute_forked(tasks, simulate, costs, cluster, mode, jobs, done)
    from joblib import Parallel, delayed

    par = Parallel(n_jobs=jobs, backend="loky", return_as="generator")
    out = []
    for (_, seeds), res in zip(tasks, par(delayed(_run_chunk)(simulate, costs, cluster, jit, seeds, mode)
                                          for jit, seeds in tasks), strict=True):
        out.append(res)
        done(len(seeds))
    return out


def _forked_chunk(payload: tuple[Callable[..., Any], IterationCosts, ClusterSpec, str,
                                  list[tuple[Jitter | None, list[int]]]], i: int) -> np.ndarray:
    """Task ``i`` of the payload (simulate, costs, cluster, mode, tasks), in a forked worker."""
    simulate, costs, cluster, mode, tasks = payload
    jit, seeds = tasks[i]
    return _run_chunk(simulate, costs, cluster, jit, seeds, mode)


def _execute_forked(tasks: list[tuple[Jitter | None, list[int]]], simulate: Callable[..., Any],
                    costs: IterationCosts, cluster: ClusterSpec, mode: str, jobs: int,
                    done: ProgressCallback) -> list[np.ndarray]:
    """The joblib backend's work on ``jobs`` forked processes (:class:`scenarios.forking.ForkedPool`:
    the payload is inherited, not pickled). Results in task order, ``done`` after each in that order,
    as joblib's ordered generator gives them."""
    pool = ForkedPool((simulate, costs, cluster, mode, tasks), min(jobs, len(tasks)))
    try:
        out = []
        for (_, seeds), res in zip(tasks, pool.map(_forked_chunk, range(len(tasks))), strict=True):
            out.append(res)
            done(len(seeds))
        return out
    finally:
        pool.close()


def _execute_dask(tasks: list[tuple[Jitter | None, list[int]]], simulate: Callable[..., Any],
                  costs: IterationCosts, cluster: ClusterSpec, mode: str, scheduler: Any,
                  done: ProgressCallback) -> list[np.ndarray]:
    try:
        from distributed import Client, as_completed
    except ImportError:  # pragma: no cover - optional dependency
        raise ConfigError("--backend", "dask needs the optional dependency: pip install 'dask[distributed]'") from None
    own = not isinstance(scheduler, Client)
    if own and not scheduler:
        raise ConfigError("--scheduler", "the dask backend needs a scheduler address (e.g. tcp://host:8786)")
    try:
        client = Client(scheduler, timeout=30) if own else scheduler
    except OSError as e:
        raise ConfigError("--scheduler", f"cannot reach the dask scheduler {scheduler!r}: {e}") from None
    try:
        # The stage costs go to the workers once; each chunk refers to them.
        costs_f, cluster_f = client.scatter([costs, cluster], broadcast=True)
        futures = [client.submit(_run_chunk, simulate, costs_f, cluster_f, jit, seeds, mode, pure=False)
                   for jit, seeds in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[np.ndarray | None] = [None] * len(futures)
        for fut in as_completed(futures):
            i = index[fut.key]
            out[i] = fut.result()
            done(len(tasks[i][1]))
        return out  # type: ignore[return-value]
    finally:
        if own:
            client.close()


def run_tasks(tasks: list[tuple[Jitter | None, list[int]]], costs: IterationCosts, cluster: ClusterSpec, *,
              simulate: Callable[..., Any] | None = None, mode: str = "realistic", jobs: int = 1,
              progress: ProgressCallback | None = None) -> list[np.ndarray]:
    """Simulate (jitter, seeds) tasks of one layout with joblib (``jobs``); rows as :func:`_run_chunk`, in
    task order. For callers that batch several configurations into one parallel pass (the jitter fit)."""
    if simulate is None:
        from trainsim.sim.engine import simulate as engine_simulate

        simulate = engine_simulate
    split = [(jit, chunk) for jit, seeds in tasks for chunk in _chunks(list(seeds), jobs)]
    counts = [len(_chunks(list(seeds), jobs)) for _, seeds in tasks]
    rows = _execute(split, simulate=simulate, costs=costs, cluster=cluster, mode=mode, jobs=jobs,
                    backend="joblib", scheduler=None, progress=progress)
    out, i = [], 0
    for c in counts:
        out.append(np.concatenate(rows[i:i + c]))
        i += c
    return out


def mean_over_min_at(samples: np.ndarray, n: int, seed: int = 0, reps: int = 4000) -> float:
    """Expected mean-over-min (percent) of ``n`` iterations drawn from ``samples``.

    The statistic depends on how many iterations it is taken over (the minimum of more draws is
    lower), so a prediction compared with a log of n iterations is taken at that n.
    """
    samples = np.asarray(samples, dtype=float)
    if n >= samples.size:
        return 100.0 * (samples.mean() / samples.min() - 1.0)
    g = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x6D6F6D,)))
    draws = samples[g.integers(0, samples.size, size=(reps, n))]
    return float(100.0 * np.mean(draws.mean(axis=1) / draws.min(axis=1) - 1.0))


def _ablation(jitter: Jitter | None, n: int, share_samples: int | None) -> tuple[int, tuple[str, ...]]:
    """(seeds re-run per source, the sources) of the per-kind-share ablation."""
    if jitter is None:
        return 0, ()
    n_share = min(n, DEFAULT_SHARE_SAMPLES if share_samples is None else max(0, share_samples))
    return n_share, (jitter.sources() if n_share else ())


def monte_carlo_total(jitter: Jitter | None, n: int, share_samples: int | None = None) -> int:
    """Simulations :func:`run_monte_carlo` reports through ``progress``: ``n`` + shares x sources."""
    n_share, sources = _ablation(jitter, n, share_samples)
    return n + n_share * len(sources)


def run_monte_carlo(costs: IterationCosts, cluster: ClusterSpec, jitter: Jitter | None, n: int, seed: int = 0,
                    jobs: int = 1, backend: str = "joblib", scheduler: Any = None,
                    progress: ProgressCallback | None = None,
                    simulate: Callable[..., Any] | None = None, mode: str = "realistic",
                    share_samples: int | None = None) -> MonteCarloResult:
    """``n`` jittered iterations (see module doc). ``share_samples``: seeds re-run per source for the
    per-kind shares (default :data:`DEFAULT_SHARE_SAMPLES`, none; at most n). ``progress(k)`` is called as each chunk
    of ``k`` simulations finishes (ablation runs included): :func:`monte_carlo_total` simulations in all."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("-n", f"the number of samples must be a positive integer, got {n!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError("--jobs", f"must be a positive integer, got {jobs!r}")
    if backend not in BACKENDS:
        raise ConfigError("--backend", f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError("--seed", f"must be a non-negative integer, got {seed!r}")
    if simulate is None:
        from trainsim.sim.engine import simulate as engine_simulate

        simulate = engine_simulate
    det = simulate(costs, cluster, mode=mode, seed=seed, perturb=None).iteration_s

    seeds = child_seeds(seed, n)
    n_share, sources = _ablation(jitter, n, share_samples)
    variants: list[tuple[str, Jitter | None]] = [("all", jitter)]
    variants += [(s, jitter.only(s)) for s in sources] if jitter is not None else []

    tasks: list[tuple[Jitter | None, list[int]]] = []
    owner: list[str] = []
    for name, jit in variants:
        part = seeds if name == "all" else seeds[:n_share]
        for chunk in _chunks(part, jobs):
            tasks.append((jit, chunk))
            owner.append(name)
    legacy = None
    if isinstance(progress, bool):  # the former ``progress=True``: a bar of its own (callers now pass a callback)
        legacy = Progress("jitter", sum(len(c) for _, c in tasks), unit="iterations", quiet=not progress)
        progress = legacy.update
    try:
        results = _execute(tasks, simulate=simulate, costs=costs, cluster=cluster, mode=mode, jobs=jobs,
                           backend=backend, scheduler=scheduler, progress=progress)
    finally:
        if legacy is not None:
            legacy.close()
    rows: dict[str, np.ndarray] = {}
    for name, _ in variants:
        rows[name] = np.concatenate([r for r, o in zip(results, owner, strict=True) if o == name])
    main = rows["all"]
    samples = main[:, 0].copy()
    exposed = {k: float(np.mean(main[:, 1 + j])) for j, k in enumerate(EXPOSED_KINDS)}

    shares: dict[str, float] = {}
    added: dict[str, float] = {}
    residual = math.nan
    if sources:
        base = float(samples[:n_share].mean()) - det
        added["all"] = base
        for s in sources:
            added[s] = float(rows[s][:, 0].mean()) - det
        if base > 0:
            shares = {s: added[s] / base for s in sources}
            residual = 1.0 - sum(shares.values())
    return MonteCarloResult(samples_s=samples, deterministic_s=det, seed=seed, jitter=jitter,
                            exposed_mean_s=exposed, per_kind_share=shares, added_s=added,
                            share_samples=n_share if sources else 0, share_residual=residual)
