"""The Python API: what every ``trainsim`` command does, as functions returning frozen results.

Example::

    import trainsim

    sc = trainsim.load_scenario("gpt20b-dgxh100", overrides={"training.micro_batches": 8})
    eq7 = trainsim.predict(sc)                    # closed form (Eq. 7)
    sim = trainsim.simulate(sc)                   # SimPy simulation, jitter and DP overlap included
    print(eq7.iteration_s, sim.iteration_s, sim.mfu)
    mc = trainsim.monte_carlo(sc, n=100, seed=1)  # jittered iterations (simulation.jitter)
    best = trainsim.sweep(sc).best                # which PP-MP-DP layout to pick
    run = trainsim.time_to_train(sc, sim.iteration_s, "2T")  # days, GPU-hours of a 2T-token run

Each result is a frozen dataclass with ``to_dict()`` (what the CLI prints with ``--json``).
Bad input raises :class:`ConfigError` (a ``ValueError``) naming the field, option or file.
The CLI (``trainsim.scenarios.cli``) is a thin layer over these functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.compose import FitProgress, Prediction
from trainsim.scenarios.compose import predict as compose_predict
from trainsim.scenarios.schema import Scenario
from trainsim.scenarios.time_to_train import TimeToTrain
from trainsim.scenarios.time_to_train import time_to_train as _time_to_train

if TYPE_CHECKING:
    from trainsim.scenarios.montecarlo import MonteCarloResult
    from trainsim.scenarios.sweep import SweepResult, SweepRow
    from trainsim.sim.compare import Comparison as SimComparison
    from trainsim.sim.engine import SimResult

__all__ = ["Comparison", "ConfigError", "MonteCarlo", "Prediction", "Scenario", "Simulation", "Sweep", "TimeToTrain",
           "load_scenario", "compare", "monte_carlo", "predict", "simulate", "sweep", "time_to_train"]

ScenarioLike = Scenario | str | os.PathLike[str]
Overrides = Mapping[str, Any] | Sequence[str] | None
#: "n more units of work done": the CLI passes a progress bar's ``update``
ProgressCallback = Callable[[int], None]


def load_scenario(path_or_name: str | os.PathLike[str], overrides: Overrides = None) -> Scenario:
    """Read a scenario file (or a bundled scenario by name) and apply overrides.

    ``overrides``: a mapping ``{"training.micro_batches": 8}`` (values as Python objects) or
    ``--set``-style strings ``["training.micro_batches=8"]`` (values parsed as YAML).
    """
    from trainsim.scenarios import schema

    if overrides is None:
        return schema.load_scenario(os.fspath(path_or_name))
    if isinstance(overrides, Mapping):
        path = schema.resolve(os.fspath(path_or_name))
        data = schema.apply_values(schema._read_yaml(path), overrides)
        return schema.scenario_from_mapping(data, name=path.stem)
    if isinstance(overrides, str | bytes):
        raise ConfigError("overrides", "expected a mapping or a list of 'section.key=value' strings, got a string")
    return schema.load_scenario(os.fspath(path_or_name), list(overrides))


def _scenario(scenario: ScenarioLike) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, str | os.PathLike):
        return load_scenario(scenario)
    raise ConfigError("scenario", "expected a Scenario, a scenario file or a bundled name, "
                                  f"got {type(scenario).__name__}")


def _guard(sc: Scenario, max_events: int | None, *, simulate: bool = True, record: bool = False,
           runs: int = 1) -> None:
    """Refuse, before anything is built, a run whose size would exhaust time or memory
    (:func:`trainsim.scenarios.guard.check_resources`; ``max_events`` raises the bounds)."""
    from trainsim.scenarios.guard import DEFAULT_MAX_EVENTS, check_resources

    check_resources(sc, max_events=DEFAULT_MAX_EVENTS if max_events is None else max_events,
                    simulate=simulate, record=record, runs=runs)


def predict(scenario: ScenarioLike, *, reference_data: str | None = None, cache_dir: str | None = None,
            max_events: int | None = None, fit_progress: FitProgress | None = None) -> Prediction:
    """Eq. 7 (the paper's closed-form 1F1B time) with its components, per-stage costs and warnings.

    A profile's first use fits and caches its regressors (tens of seconds), reported to
    ``fit_progress`` (``set_total(n)``, then ``update(1)`` per regressor); the same holds for every
    function below that takes it.
    """
    sc = _scenario(scenario)
    _guard(sc, max_events, simulate=False)
    return compose_predict(sc, reference_data=reference_data, cache_dir=cache_dir, fit_progress=fit_progress)


@dataclass(frozen=True)
class Simulation:
    """One simulated iteration (``trainsim run``): the SimPy result beside its Eq. 7 prediction."""

    prediction: Prediction
    result: SimResult
    trace: str | None = None  # where the Perfetto trace was written, if asked
    trace_note: str | None = None  # what the trace left out, if anything

    @property
    def scenario(self) -> Scenario:
        return self.prediction.scenario

    @property
    def iteration_s(self) -> float:
        return self.result.iteration_s

    @property
    def eq7_s(self) -> float:
        return self.result.eq7_s

    @property
    def tokens_per_s(self) -> float | None:
        return self.result.tokens_per_s

    @property
    def mfu(self) -> float | None:
        return self.result.mfu

    @property
    def bubble_share(self) -> float:
        return self.result.bubble_share

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.prediction.warnings

    def to_dict(self) -> dict[str, Any]:
        """What ``trainsim run --json`` prints."""
        pred, result, sc = self.prediction, self.result, self.prediction.scenario
        out: dict[str, Any] = {
            "scenario": sc.name,
            "mode": str(result.mode),
            "iteration_s": result.iteration_s,
            "eq7_s": result.eq7_s,
            "sim_wall_s": result.sim_wall_s,
            "events": result.events,
            "tokens_per_s": result.tokens_per_s,
            "mfu": result.mfu,
            "bubble_share": result.bubble_share,
            "pipeline_s": result.pipeline_s,
            "exposed_s": {str(k): v for k, v in result.exposed.items()},
            "components": {str(k): v for k, v in result.breakdown.items()},
            "critical": {"stage": result.critical[0], "replica": result.critical[1]},
            "eq7": pred.eq7.components(),
            "memory_gib_per_gpu": pred.memory_gib_per_gpu,
            "gpus": sc.gpus,
            "profile": pred.profile_name,
            "notes": list(pred.costs.notes),
            "host_band_s": (list(pred.host_band.scaled(result.eq7_s, result.iteration_s))
                            if pred.host_band is not None else None),
            "warnings": list(pred.warnings),
            "extrapolated": pred.extrapolated.to_dict(),
        }
        if self.trace is not None:
            out["trace"] = {"path": self.trace, "note": self.trace_note}
        return out


def simulate(scenario: ScenarioLike, *, trace: str | os.PathLike[str] | None = None,
             trace_replicas: str = "critical", ideal: bool = False, record: bool = False,
             reference_data: str | None = None, cache_dir: str | None = None,
             max_events: int | None = None, fit_progress: FitProgress | None = None,
             progress: Callable[[float], None] | None = None) -> Simulation:
    """Simulate one iteration with the scenario's schedule, mode, seed, DP overlap and jitter.

    ``trace``: write a Perfetto / Chrome trace JSON there (atomically). ``trace_replicas``:
    ``"critical"`` keeps the critical replica of every stage and the links its traffic used;
    ``"all"`` keeps every stage replica. ``record``: keep every span in ``result.spans``
    (for plots). ``ideal``: Eq. 7's assumptions (equals Eq. 7). ``progress(simulated_s)`` is
    called now and then during a long run.
    """
    from trainsim.scenarios.compose import simulate_prediction

    if trace_replicas not in ("critical", "all"):
        raise ConfigError("--trace-replicas", f"expected critical or all, got {trace_replicas!r}")
    sc = _scenario(scenario)
    # a critical-replica trace simulates twice; a full one keeps every span
    _guard(sc, max_events, record=record or (trace is not None and trace_replicas == "all"),
           runs=2 if trace is not None and trace_replicas == "critical" else 1)
    pred = compose_predict(sc, reference_data=reference_data, cache_dir=cache_dir, fit_progress=fit_progress)
    if trace is None:
        return Simulation(pred, simulate_prediction(pred, ideal=ideal, record=record, progress=progress))
    from trainsim.scenarios.trace import trace_simulation

    result, path, note = trace_simulation(pred, Path(trace), replicas=trace_replicas, ideal=ideal, record=record,
                                          progress=progress)
    return Simulation(pred, result, trace=str(path), trace_note=note)


@dataclass(frozen=True)
class Comparison:
    """Eq. 7 beside the simulation, the difference attributed cause by cause (``trainsim compare``)."""

    scenario: str
    result: SimComparison
    warnings: tuple[str, ...] = ()

    @property
    def eq7_s(self) -> float:
        return self.result.eq7_s

    @property
    def sim_s(self) -> float:
        return self.result.sim_s

    #: per stage, seconds per micro-batch that measured interference adds inside the stage times
    #: (FSDP2's gathers, CP's ring: closed forms, in Eq. 7 and the simulation alike, so not in
    #: ``attribution``, whose ``interference`` is the DP buckets' overlap the simulation plays)
    interference_in_steps_s: tuple[float, ...] = ()
    #: per stage, seconds per micro-batch the profile's measured power cap adds to the compute
    #: (calibration.power_cap; in Eq. 7 and the simulation alike)
    power_cap_s: tuple[float, ...] = ()

    @property
    def attribution(self) -> dict[str, float]:
        return dict(self.result.attribution)

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_json(), "scenario": self.scenario,
                "interference_in_steps_s": list(self.interference_in_steps_s), "power_cap_s": list(self.power_cap_s)}


def compare(scenario: ScenarioLike, *, ideal: bool = False, reference_data: str | None = None,
            cache_dir: str | None = None, max_events: int | None = None,
            fit_progress: FitProgress | None = None) -> Comparison:
    """Switch the simulation's departures from Eq. 7 on one at a time and attribute the difference."""
    from trainsim.sim.compare import CAUSES
    from trainsim.sim.compare import compare as _compare

    sc = _scenario(scenario)
    _guard(sc, max_events, runs=len(CAUSES) + 1)
    pred = compose_predict(sc, reference_data=reference_data, cache_dir=cache_dir, fit_progress=fit_progress)
    sc = pred.scenario
    c = _compare(pred.costs, sc.cluster, ideal=ideal, seed=sc.simulation.seed,
                 overlap_dp=sc.overlap_grad_reduce, schedule=sc.parallelism.schedule)
    return Comparison(sc.name, c, pred.warnings, tuple(st.interference_in_steps_s for st in pred.costs.stages),
                      tuple(st.power_cap_s for st in pred.costs.stages))


@dataclass(frozen=True)
class MonteCarlo:
    """``n`` jittered iterations of a scenario (``trainsim jitter``)."""

    scenario: str
    jitter_configured: bool
    result: MonteCarloResult
    warnings: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:  # n, min_s, mean_s, p50_s, p95_s, max_s, samples_s, ...
        if name.startswith("__") or name == "result":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.result, name)

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "jitter_configured": self.jitter_configured, **self.result.to_json()}


def monte_carlo(scenario: ScenarioLike, n: int, seed: int | None = None, jobs: int = 1, backend: str = "joblib",
                *, scheduler: Any = None, shares: int | None = None, progress: ProgressCallback | None = None,
                reference_data: str | None = None, cache_dir: str | None = None,
                max_events: int | None = None, fit_progress: FitProgress | None = None) -> MonteCarlo:
    """Monte Carlo of jittered iterations: min, mean, p50, p95, max, mean over min, and with ``shares=K``
    each source's share of the added time (K seeds re-run per source; none by default).

    ``seed`` defaults to ``simulation.seed``; the same seed gives the same samples bit for bit
    whatever ``jobs`` or ``backend`` (``joblib`` or ``dask`` with ``scheduler``).
    """
    from trainsim.scenarios.compose import scenario_simulator
    from trainsim.scenarios.montecarlo import run_monte_carlo
    from trainsim.sim.jitter_config import parse_jitter

    sc = _scenario(scenario)
    jitter = parse_jitter(sc.simulation.jitter)
    if jitter is not None and sc.simulation.mode != "realistic":
        raise ConfigError("simulation.mode", "jitter needs the realistic mode; the ideal mode follows Eq. 7")
    if backend == "dask" and not scheduler:
        raise ConfigError("--scheduler", "--backend dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
    _guard(sc, max_events)  # per iteration: each Monte Carlo sample is one run, none kept in memory
    pred = compose_predict(sc, reference_data=reference_data, cache_dir=cache_dir, fit_progress=fit_progress)
    res = run_monte_carlo(pred.costs, sc.cluster, jitter, n, seed=sc.simulation.seed if seed is None else seed,
                          jobs=jobs, simulate=scenario_simulator(sc), backend=backend, scheduler=scheduler,
                          progress=progress, mode=sc.simulation.mode, share_samples=shares)
    return MonteCarlo(sc.name, jitter is not None, res, pred.warnings)


@dataclass(frozen=True)
class Sweep:
    """Every PP-MP-DP layout of a scenario's GPU count at its global batch, ranked (``trainsim sweep``)."""

    result: SweepResult

    @property
    def rows(self) -> tuple[SweepRow, ...]:
        return self.result.rows

    @property
    def best(self) -> SweepRow | None:
        """The fastest layout that fits in GPU memory (None if none does)."""
        return self.result.best

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        return self.result.to_dict(top)


def sweep(scenario: ScenarioLike, *, pp: Collection[int] | None = None, mp: Collection[int] | None = None,
          cp: Collection[int] | None = None, sequence_parallel: Collection[bool] | None = None,
          micro_batch: Collection[int] | None = None, schedule: Collection[str] | None = None,
          top: int | None = None, jobs: int = 1, dask: Any = None,
          progress: ProgressCallback | None = None, reference_data: str | None = None,
          cache_dir: str | None = None, max_events: int | None = None) -> Sweep:
    """Predict and memory-check every layout ``pp * mp * dp * cp`` of the scenario's GPU count, and
    simulate those that fit.

    ``cp``: context-parallel degrees to try (default the scenario's); ``sequence_parallel``: the
    settings to try, e.g. ``(False, True)`` (default the scenario's); ``micro_batch``: micro-batch
    sizes (the global batch is kept: micro-batches per replica follow b and dp); ``schedule``:
    ``"1f1b"``, ``"gpipe"``, ``"interleaved-1f1b"`` or ``"interleaved-1f1b:V"`` (what ``trainsim
    sweep --schedule`` takes). ``top``: simulate only what can still enter the best ``top`` (branch
    and bound on :func:`sim.bound.lower_bound`; None: every layout that fits). ``jobs`` worker
    processes, or ``dask`` (a scheduler address, ``"local"`` or a ``distributed.Client``). Layouts the
    model, the cluster or the resource guard refuse are listed in ``result.skipped`` with the reason.
    """
    from trainsim.scenarios.sweep import parse_schedules, sweep_layouts

    sc = _scenario(scenario)
    res = sweep_layouts(sc, pps=None if pp is None else sorted(set(pp)), mps=None if mp is None else sorted(set(mp)),
                        cps=None if cp is None else sorted(set(cp)),
                        sps=None if sequence_parallel is None else list(dict.fromkeys(sequence_parallel)),
                        micro_batches=None if micro_batch is None else sorted(set(micro_batch)),
                        schedules=None if schedule is None else parse_schedules(
                            list(schedule), sc.parallelism.virtual_stages if sc.parallelism.virtual_stages > 1 else 2,
                            option="schedule"),
                        top=top, jobs=jobs, dask=dask,
                        reference_data=reference_data, cache_dir=cache_dir, progress=progress,
                        check=lambda s: _guard(s, max_events))
    return Sweep(res)


def time_to_train(scenario: ScenarioLike, iteration_s: float, tokens: float | str,
                  basis: str = "given") -> TimeToTrain:
    """A whole run of ``tokens`` tokens (a number, or text such as ``"2T"`` or ``"300B"``) at ``iteration_s``
    per iteration of ``scenario``: iterations, days, GPU-hours and node-hours (``trainsim run --train-tokens``).
    Steady state only: no warm-up, checkpoint saves, evaluation or restarts."""
    return _time_to_train(_scenario(scenario), iteration_s, tokens, basis)
