"""The composition root: scenario -> stage plans -> duration profile -> stage costs -> Eq. 7.

This is the only place that wires operators, topology, calibration and sim together.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from trainsim.operators import ConfigError, DurationModel, Op, StagePlan, build_stage_plans
from trainsim.operators.memory import MemoryEstimate, MemoryFit, fit_report, memory_per_gpu
from trainsim.operators.ops import Direction
from trainsim.scenarios.extrapolation import Extrapolation, find_extrapolated, stage_ops
from trainsim.scenarios.schema import Scenario
from trainsim.sim.costs import IterationCosts, build_costs
from trainsim.sim.eq7 import Eq7Result, eq7
from trainsim.sim.host_time import host_entry, host_machine_factors
from trainsim.topology import GPU_PRESETS

if TYPE_CHECKING:  # the engine imports simpy: not for `trainsim predict`
    from trainsim.sim.engine import SimResult

_PROFILE_CACHE: dict[tuple[str, str | None, str | None], DurationModel] = {}


class FitProgress(Protocol):
    """Told how many regressors a first use of a profile fits, then each one fitted
    (:class:`trainsim.scenarios.progress.Progress` is one)."""

    def update(self, n: int = 1) -> None: ...

    def set_total(self, total: int | None) -> None: ...


def duration_model(scenario: Scenario, reference_data: str | None = None,
                   cache_dir: str | None = None, fit_progress: FitProgress | None = None) -> DurationModel:
    """Resolve ``profile.name`` into a duration model (loaded once per process; fitted and
    cached on first use, reported to ``fit_progress``)."""
    name = scenario.profile.name
    ref = scenario.profile.reference_data or reference_data
    if name == "roofline" or name.startswith("roofline:"):
        from trainsim.calibration.roofline import RooflineProfile

        gpu_name = name.partition(":")[2]
        if gpu_name and gpu_name not in GPU_PRESETS:
            raise ConfigError("profile.name", f"unknown GPU {gpu_name!r} for the roofline profile; "
                              f"known: {', '.join(GPU_PRESETS)}")
        gpu = GPU_PRESETS[gpu_name] if gpu_name else scenario.cluster.gpu
        # cheap to build, and a plain "roofline" depends on the scenario's GPU: never cached
        return RooflineProfile(f"roofline:{gpu.name}", peak_flops=gpu.peak_flops, mem_bw=gpu.mem_bw,
                               peak_fp8=gpu.peak_fp8)
    regressors = scenario.profile.model  # None: the loader's default (calibration.profile.default_model)
    key = (name, ref, cache_dir, regressors)
    if key not in _PROFILE_CACHE:
        from trainsim.calibration import load_profile

        _PROFILE_CACHE[key] = load_profile(
            name, reference_dir=ref, cache_dir=cache_dir,
            progress=None if fit_progress is None else fit_progress.update,
            on_total=None if fit_progress is None else fit_progress.set_total, model=regressors)
    model = _PROFILE_CACHE[key]
    with_mode = getattr(model, "with_extrapolation", None)
    if with_mode is not None:
        gpu = scenario.cluster.gpu
        model = with_mode(scenario.profile.extrapolation, (gpu.peak_flops, gpu.mem_bw))
    factor = scenario.profile.host_factor
    return model if factor is None else _HostScaled(model, factor)


#: a host band narrower than this share of the iteration is not reported (the GPU hides the host)
HOST_BAND_MIN = 0.005


@dataclass(frozen=True)
class HostBand:
    """The iteration on the fastest and the slowest host measured for the profile's runtimes.

    A PyTorch runtime's host cost is fitted as one line for the kind's typical machine, and lent
    machines of one kind measured ``lo_factor`` to ``hi_factor`` times it (calibration/host_overhead.py,
    ``lease_factors``; a profile that borrows another kind's lines carries its own machines' factors
    against them, calibration/host_factors.py). ``lo_s`` and ``hi_s`` are Eq. 7's iteration with every
    host line scaled by those factors: what the same layout takes on those hosts. Where the GPU sets the pace they
    meet; where the host does, they part by up to the factors' spread."""

    lo_factor: float
    hi_factor: float
    lo_s: float
    hi_s: float
    machines: int

    def text(self, mid_s: float, at_s: float) -> str:
        """One line for the reports, around ``at_s`` (see :meth:`scaled`)."""
        lo, hi = self.scaled(mid_s, at_s)
        return (f"host band: {lo:.4g} to {hi:.4g} s on the fastest and the slowest of the {self.machines} hosts "
                f"measured for the profile (x{self.lo_factor:.2f} to x{self.hi_factor:.2f} of the typical host's cost; "
                "other hosts measured have run outside it: docs/multi_gpu.md)")

    def scaled(self, mid_s: float, at_s: float) -> tuple[float, float]:
        """The band around another estimate ``at_s`` of the same iteration (the simulated one),
        by the band's ratios to Eq. 7's ``mid_s``."""
        return at_s * self.lo_s / mid_s, at_s * self.hi_s / mid_s


class _Wrapped:
    """A duration model that answers for another: what it does not define itself is the other's."""

    _model: DurationModel

    def __getattr__(self, name: str) -> Any:
        if name == "_model":  # not set yet (unpickling): no recursion through the lookup below
            raise AttributeError(name)
        return getattr(self._model, name)


class _Priced(_Wrapped):
    """A duration model that keeps the operator prices it has given (``op_seconds`` by operators
    and direction), so the host band's cost builds, which price the same operators, reuse them."""

    def __init__(self, model: DurationModel) -> None:
        self._model = model
        self._memo: dict[tuple[tuple[Op, ...], Direction], np.ndarray] = {}

    def op_seconds(self, ops: Sequence[Op], direction: Direction) -> np.ndarray:
        key = (tuple(ops), Direction(direction))
        if key not in self._memo:
            self._memo[key] = np.asarray(self._model.op_seconds(ops, direction), dtype=float)
        return self._memo[key].copy()


class _HostScaled(_Wrapped):
    """A duration model whose host lines are ``factor`` times another's (everything else its,
    the operator prices included: a :class:`_Priced` model's are reused)."""

    def __init__(self, model: DurationModel, factor: float) -> None:
        self._model = model
        keys = ("per_layer_s", "per_iteration_s", "checkpoint_s")
        self.host_overhead = {rt: {**e, **{k: e[k] * factor for k in keys if k in e}}
                              for rt, e in (getattr(model, "host_overhead", None) or {}).items()}


def has_host_lines(model: DurationModel, plans: Sequence[StagePlan]) -> bool:
    """Whether the profile has a host line for the runtime of one of ``plans``."""
    table = getattr(model, "host_overhead", None) or {}
    return any(p.runtime is not None and host_entry(table, p.runtime)[0] is not None for p in plans)


def host_band(scenario: Scenario, plans: tuple[StagePlan, ...], model: DurationModel,
              mid_s: float) -> HostBand | None:
    """Eq. 7 on the fastest and the slowest measured host, where the runtime has a host line and
    the two differ by at least :data:`HOST_BAND_MIN` of ``mid_s``; else None."""
    if not has_host_lines(model, plans):
        return None
    factors = host_machine_factors(getattr(model, "host_overhead", None) or {})
    if len(factors) < 2:
        return None
    lo, hi = min(factors.values()), max(factors.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the prediction itself has reported them
        ends = [eq7(build_costs(plans, scenario.training, scenario.parallelism, scenario.cluster,
                                _HostScaled(model, f), power_cap=scenario.profile.power_cap)).iteration_s
                for f in (lo, hi)]
    if ends[1] - ends[0] < HOST_BAND_MIN * mid_s:
        return None
    return HostBand(lo, hi, ends[0], ends[1], len(factors))


def in_band(band_s: Sequence[float] | None, measured_s: float) -> bool:
    """Whether a measured time lies inside a reported host band ``[lo, hi]`` (False without one)."""
    return bool(band_s) and band_s[0] <= measured_s <= band_s[1]


#: a host band narrower than this share of the prediction: the host cannot set the row's pace
GPU_PACED_BAND = 0.02


def gpu_paced(band_s: Sequence[float] | None, predicted_s: float) -> bool:
    """Whether the GPU paces a predicted row: it has no host band, or one under :data:`GPU_PACED_BAND` of
    its prediction wide (the fastest and the slowest host measured give nearly the same time)."""
    return not band_s or (band_s[1] - band_s[0]) < GPU_PACED_BAND * predicted_s


@dataclass(frozen=True)
class Prediction:
    scenario: Scenario
    plans: tuple[StagePlan, ...]
    costs: IterationCosts
    eq7: Eq7Result
    profile_name: str
    warnings: tuple[str, ...]
    memory: MemoryEstimate  # peak memory of the busiest GPU (operators.memory)
    # what is priced outside the profile's sampled range, and its share of the iteration
    # (scenarios.extrapolation); the headline says "extrapolated" above 1%
    extrapolated: Extrapolation = field(default_factory=Extrapolation)
    # the iteration on the fastest and the slowest host measured, where the host can set the pace
    host_band: HostBand | None = None

    @property
    def memory_gib_per_gpu(self) -> float:
        return self.memory.total_gib

    @property
    def profile_label(self) -> str:
        """The profile's name, with the host factor the scenario pins (``profile.host_factor``)."""
        factor = self.scenario.profile.host_factor
        return self.profile_name if factor is None else f"{self.profile_name} (host x{factor:g})"

    @property
    def memory_fit(self) -> MemoryFit:
        """The memory estimate against the GPU's capacity."""
        return fit_report(self.memory, self.scenario.cluster.gpu.mem_gib)

    @property
    def model_flops(self) -> float:
        """Model FLOPs of one iteration over all GPUs (recompute not counted, as MFU defines it)."""
        from trainsim.sim.costs import model_flops

        par = self.scenario.parallelism
        return model_flops(self.costs, self.scenario.training.micro_batches, par.mp, par.dp)

    def mfu(self, iteration_s: float) -> float:
        from trainsim.sim.costs import mfu

        value = mfu(self.model_flops, iteration_s, self.scenario.gpus, self.scenario.cluster.gpu.peak_flops)
        return value if value is not None else 0.0

    def tokens_per_s(self, iteration_s: float) -> float:
        return self.scenario.tokens_per_iteration / iteration_s

    @property
    def iteration_s(self) -> float:
        """Eq. 7's iteration time (s)."""
        return self.eq7.iteration_s

    def to_dict(self) -> dict[str, Any]:
        """Everything ``trainsim predict --json`` prints (JSON-ready)."""
        return self.to_json()

    def to_json(self) -> dict[str, Any]:
        sc, e = self.scenario, self.eq7
        par, tr = sc.parallelism, sc.training
        return {
            "scenario": sc.name,
            "model": sc.model.name,
            "layout": {"pp": par.pp, "mp": par.mp, "dp": par.dp, "cp": par.cp, "gpus": sc.gpus,
                       "sequence_parallel": par.sequence_parallel, "schedule": par.schedule.value,
                       "virtual_stages": par.virtual_stages, "split": par.split.value},
            "micro_batch": tr.micro_batch,
            "micro_batches": tr.micro_batches,
            "cluster": sc.cluster.name,
            "profile": self.profile_name,
            "host_factor": sc.profile.host_factor,
            "iteration_s": e.iteration_s,
            "paper_iteration_s": e.paper_iteration_s,
            "components": e.components(),
            "tokens_per_s": self.tokens_per_s(e.iteration_s),
            "mfu": self.mfu(e.iteration_s),
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "memory": {**self.memory.to_json(), "capacity_gib": self.memory_fit.capacity_gib},
            "fits": self.memory_fit.fits,
            "stages": [
                {
                    "stage": s.index, "encoders": p.encoders, "params": s.params,
                    "fwd_s": s.fwd_s, "bwd_s": s.bwd_s,
                    "fwd_compute_s": s.fwd_compute_s, "bwd_compute_s": s.bwd_compute_s,
                    "mp_fwd_s": s.mp_fwd_s, "mp_bwd_s": s.mp_bwd_s,
                    "cp_fwd_s": s.cp_fwd_s, "cp_bwd_s": s.cp_bwd_s,
                    "p2p_fwd_s": s.p2p_fwd_s, "p2p_bwd_s": s.p2p_bwd_s,
                    "dp_allreduce_s": s.dp_allreduce_s, "dp_allgather_s": s.dp_allgather_s,
                    "optimizer_s": s.optimizer_s,
                }
                for s, p in zip(self.costs.stages, self.plans, strict=True)
            ],
            "notes": list(self.costs.notes),
            "host_band": (None if self.host_band is None else
                          {"iteration_s": [self.host_band.lo_s, self.host_band.hi_s],
                           "host_factors": [self.host_band.lo_factor, self.host_band.hi_factor],
                           "machines": self.host_band.machines}),
            "warnings": list(self.warnings),
            "extrapolated": self.extrapolated.to_dict(),
        }


def predict(scenario: Scenario, reference_data: str | None = None, cache_dir: str | None = None,
            fit_progress: FitProgress | None = None, band: bool = True) -> Prediction:
    """Eq. 7 of the scenario with its costs, memory, notes and (``band``) its :class:`HostBand`."""
    plans = build_stage_plans(scenario.model, scenario.training, scenario.parallelism)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = duration_model(scenario, reference_data, cache_dir, fit_progress)
        priced = _Priced(model) if band else model  # the band's builds reuse these prices
        costs = build_costs(plans, scenario.training, scenario.parallelism, scenario.cluster, priced,
                            power_cap=scenario.profile.power_cap)
    from trainsim.calibration import ExtrapolationWarning
    from trainsim.calibration.samples import DataQuirkWarning

    quirks = [w for w in caught if issubclass(w.category, DataQuirkWarning)]
    msgs = [str(w.message) for w in caught if not issubclass(w.category, DataQuirkWarning)]
    outside = [str(w.message) for w in caught if issubclass(w.category, ExtrapolationWarning)]
    if quirks:  # found once, when the profile is fitted; listed by `trainsim profile show`
        name = scenario.profile.name
        msgs.append(f"profile {name}: {len(quirks)} data quirks in its samples, kept as measured "
                    f"(`trainsim profile show {name}` lists them)")
    msgs += closed_form_notes(scenario)
    msgs += above_bar_notes(model, plans)
    target = getattr(model, "target", None)
    if target is not None and getattr(target, "gpu", scenario.cluster.gpu.name) != scenario.cluster.gpu.name:
        msgs.append(f"profile {getattr(model, 'name', '')} prices a {target.gpu}, the cluster has "
                    f"{scenario.cluster.gpu.name} (MFU and memory are the cluster's; set cluster.gpu to match)")
    memory = memory_per_gpu(scenario.model, scenario.training, scenario.parallelism, plans)
    fit = fit_report(memory, scenario.cluster.gpu.mem_gib)
    if not fit.fits:
        msgs.append(f"memory: {fit.message} per GPU (stage with the most; operators.memory's estimate)")
    result = eq7(costs)
    extrapolated = find_extrapolated(model, plans, costs, scenario.training, scenario.cluster, result.iteration_s,
                                     tuple(dict.fromkeys(outside)))
    factor = scenario.profile.host_factor
    if factor is not None and not has_host_lines(model, plans):
        msgs.append(f"profile.host_factor {factor:g}: profile {getattr(model, 'name', scenario.profile.name)} has no "
                    "host cost for this run's runtime, so it changes nothing")
    # a host the user pinned (profile.host_factor) has no band: the band is the measured machines' range
    hb = host_band(scenario, plans, priced, result.iteration_s) if band and factor is None else None
    return Prediction(scenario, plans, costs, result, getattr(model, "name", scenario.profile.name),
                      tuple(dict.fromkeys(msgs)), memory, extrapolated, hb)


def above_bar_notes(model: DurationModel, plans: tuple[StagePlan, ...] | list[StagePlan]) -> list[str]:
    """One note naming the operators this run prices with a regressor whose validation MAPE is above
    the profile bar (calibration.profile.VALIDATION_BAR_PCT), with that error."""
    regressors = getattr(model, "regressors", None)
    if regressors is None:
        return []
    from trainsim.calibration.profile import VALIDATION_BAR_PCT

    used = {f"op:{op.kind.value}:{d.value}": None for plan in plans for op, d, _ in stage_ops(plan, 1)
            if d is not Direction.UPDATE}  # the per-micro-batch operators
    bad = []
    for key in used:
        if key in regressors:
            mape = regressors[key].summary.get("validation_mape")
            if mape is not None and mape > VALIDATION_BAR_PCT:
                bad.append(f"{key.split(':')[1]} {key.split(':')[2]} {mape:.0f} %")
    if not bad:
        return []
    name = getattr(model, "name", "the profile")
    return [f"profile {name}: {', '.join(bad)} validation error, above the {VALIDATION_BAR_PCT:g} % bar "
            f"(`trainsim profile show {name}`)"]


def layout_text(scenario: Scenario) -> str:
    """The layout as the reports name it: ``PP4 MP8 DP2`` with CP, sequence parallelism and
    interleaving where used, and the GPU count."""
    par = scenario.parallelism
    parts = [f"PP{par.pp} MP{par.mp} DP{par.dp}"]
    if par.cp > 1:
        parts.append(f"CP{par.cp}")
    if par.sequence_parallel and par.mp > 1:
        parts.append("SP")
    if par.virtual_stages > 1:
        parts.append(f"interleaved x{par.virtual_stages}")
    return f"{' '.join(parts)} ({scenario.gpus} GPU{'s' if scenario.gpus != 1 else ''})"


def memory_line(pred: Prediction) -> str:
    """The memory estimate against the GPU, as ``run`` and ``predict`` print it."""
    fit = pred.memory_fit
    if fit.fits:
        verdict = f"fits in {fit.capacity_gib:.0f} GiB"
    else:
        verdict = f"DOES NOT FIT: {fit.needed_gib:.1f} GiB needed of {fit.capacity_gib:.0f} GiB"
    return f"memory per GPU (estimate)    {fit.needed_gib:11.1f} GiB  ({verdict})"


def closed_form_notes(scenario: Scenario) -> list[str]:
    """What Eq. 7 (``predict``) does not define and only the simulation (``run``) sees."""
    out = []
    if scenario.overlap_grad_reduce and scenario.parallelism.grad_ranks > 1 and not scenario.training.fsdp_sharded:
        out.append("Eq. 7 charges the gradient reduction after the pipeline; overlap_grad_reduce (buckets reduced "
                   "during the last backward) is seen by `trainsim run`")
    if scenario.simulation.jitter:
        out.append("Eq. 7 has no jitter; `trainsim run` and `trainsim jitter` apply simulation.jitter")
    return out


def scenario_simulator(scenario: Scenario) -> Callable[..., SimResult]:
    """``sim.engine.simulate`` with the scenario's schedule and DP-overlap choice bound (picklable,
    so Monte Carlo workers and jitter fits simulate exactly what ``simulate_prediction`` does)."""
    import functools

    from trainsim.sim.engine import simulate

    return functools.partial(simulate, schedule=scenario.parallelism.schedule,
                             overlap_dp=scenario.overlap_grad_reduce)


def simulate_prediction(pred: Prediction, *, ideal: bool = False, record: Any = False,
                        progress: Callable[[float], None] | None = None) -> SimResult:
    """Simulate a prediction's scenario once, with its mode, seed, schedule, DP overlap and jitter.

    ``record``: ``False``, ``True`` (every span) or a collection of ``(stage, replica)`` pairs whose
    tracks are kept (see :func:`trainsim.sim.engine.simulate`).
    """
    from trainsim.sim.jitter_config import parse_jitter

    sc = pred.scenario
    mode = "ideal" if ideal else sc.simulation.mode
    perturb = parse_jitter(sc.simulation.jitter) if mode == "realistic" else None
    return scenario_simulator(sc)(pred.costs, sc.cluster, mode=mode, seed=sc.simulation.seed, perturb=perturb,
                                  record=record, tokens_per_iteration=sc.tokens_per_iteration, progress=progress)
