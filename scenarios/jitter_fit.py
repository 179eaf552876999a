"""``trainsim jitter fit``: one jitter parameter set for a machine and a day, fitted jointly to
the measured iteration times of several layouts.

The parameters describe the fabric, not a layout (:mod:`sim.jitter`): the per-message noise
``sigma`` of the NIC tier and fabric-wide congestion episodes (``scope: tier``) with a
``bandwidth_factor`` and a ``latency_s`` per protocol step (severity), a mean length
``mean_on_s`` and a duty cycle ``d = mean_on_s / (mean_on_s + mean_off_s)`` (with the length,
the rate of episodes). ``step_latency=False`` holds the latency at 0. The
NVLink noise, the compute noise and the stragglers are held at the scenario's values (machine
constants; zero unless set). A layout's spread then follows from its simulation: how much
blocking inter-node traffic its critical path holds and how much of it overlaps compute.

How (the numbers in docs/jitter.md):

1. For each layout, the simulator itself is run (a) on a grid of NIC sigmas with the same seeds
   (common random numbers: :mod:`sim.jitter` keys its streams, so a seed's draws are the same
   standard normals at every sigma), giving the noise-only distribution at each sigma, and (b) with the fabric
   congested throughout at each of a grid of bandwidth factors and step latencies: ``T(b, L) / T(1, 0)``.
2. An emulator built from those runs gives an iteration's time for any candidate: a quantile
   of the noise-only distribution at the candidate sigma (interpolated on the grid) is the work;
   congestion episodes from the candidate's alternating exponential on/off process slow its progress by
   ``T(b, L)/T(1, 0)`` (bilinear in log b and L) while on. Thousands of emulated iterations cost
   milliseconds, so the search is global (a Sobol design, then Nelder-Mead from the best points).
3. The distance is the 1-Wasserstein distance between the measured and emulated
   log-times of each layout after the best shift (the shift absorbs the profile's error in
   absolute time: the fit reads only the spread), averaged over the layouts.
4. The fitted set is checked with the full simulation: per layout the same distance, the
   Kolmogorov-Smirnov distance, the emulator's own KS distance from the simulation, and the
   mean-over-min, measured and predicted at the measured number of iterations.
"""

from __future__ import annotations

import copy
import csv
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.montecarlo import child_seeds, mean_over_min_at, run_monte_carlo, run_tasks
from trainsim.scenarios.progress import ProgressCallback
from trainsim.sim.costs import IterationCosts
from trainsim.sim.jitter import FIELD, Jitter
from trainsim.sim.jitter_config import JITTER_PRESETS, parse_jitter
from trainsim.topology import ClusterSpec

LIB_SIGMAS = (0.0, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)  # NIC per-message sigma grid of the emulator (its upper bound too)
LIB_SEEDS = 30  # seeds per sigma
B_GRID = (1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08, 0.05)  # bandwidth factors of the slowdown curve
L_GRID = (0.0, 1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3)  # step latencies (s) of the slowdown surface; its upper bound
ON_RANGE = (0.1, 100.0)  # mean episode length searched, in deterministic iteration times of the layouts
MAX_DUTY = 0.9
EMULATED = 2000  # emulated iterations per layout and candidate
SEARCH_POINTS = 512
CHECK_N = 100  # full-simulation iterations per layout for the goodness of fit
FITTED = ("noise.nic.sigma", "congestion.nic.bandwidth_factor", "congestion.nic.mean_on_s",
          "congestion.nic.mean_off_s", "congestion.nic.latency_s")
_U = (np.arange(400) + 0.5) / 400  # quantile levels of the distances


@dataclass(frozen=True)
class LayoutLog:
    """One layout's measured times and what its simulation needs."""

    name: str  # the scenario
    label: str  # where the times come from (file, job)
    measured_s: np.ndarray
    costs: IterationCosts
    cluster: ClusterSpec
    simulate: Callable[..., Any] | None = None
    averaged_over: int = 1


@dataclass(frozen=True)
class Params:
    sigma: float  # NIC per-message lognormal sigma (dimensionless)
    bandwidth_factor: float  # capacity multiplier while congested, (0, 1]
    mean_on_s: float  # mean episode length, s
    duty: float  # fraction of time congested
    latency_s: float = 0.0  # delay per protocol step while congested, s

    @property
    def mean_off_s(self) -> float | None:
        return self.mean_on_s * (1 - self.duty) / self.duty if self.duty > 0 else None

    @property
    def congested(self) -> bool:
        return self.duty > 1e-4 and (self.bandwidth_factor < 0.999 or self.latency_s > 1e-7)

    def mapping(self, fixed: Mapping[str, Any]) -> dict[str, Any]:
        """``simulation.jitter``: the machine constants of ``fixed`` with these values on top."""
        m = _merge(fixed, {"noise": {"nic": {"sigma": round(self.sigma, 4)}}})
        m.get("congestion", {}).pop("nic", None)
        if self.congested:
            m.setdefault("congestion", {})["nic"] = {
                "bandwidth_factor": round(self.bandwidth_factor, 4), "mean_on_s": round(self.mean_on_s, 3),
                "mean_off_s": round(float(self.mean_off_s), 3), "scope": "tier",
                **({"latency_s": float(f"{self.latency_s:.4g}")} if self.latency_s > 1e-7 else {})}
        if not m.get("congestion"):
            m.pop("congestion", None)
        return m


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


def fixed_constants(raw_jitter: Any) -> dict[str, Any]:
    """The scenario's jitter (preset expanded) without the fitted keys: the constants the fit holds."""
    jit = parse_jitter(raw_jitter) if raw_jitter else None
    m = jit.to_mapping() if jit is not None else {}
    nic = m.get("noise", {}).get("nic")
    if nic is not None:
        nic.pop("sigma", None)
        nic.pop("kinds", None)  # one sigma for every kind: a per-kind sigma would describe the layout
        if not nic:
            m["noise"].pop("nic")
    m.get("congestion", {}).pop("nic", None)
    return {k: v for k, v in m.items() if v}


# -- the emulator -----------------------------------------------------------------------------------------


@dataclass
class Emulator:
    """A layout's simulated responses (see module doc, step 2) and its fixed random draws."""

    sigmas: np.ndarray  # (G,)
    library: np.ndarray  # (G, K) iteration seconds: seed k at sigma g
    log_b: np.ndarray  # ascending log bandwidth factors
    slowdown: np.ndarray  # T(b, L) / T(1, 0) at (log_b, latency)
    deterministic_s: float
    seed: int
    latency: np.ndarray = field(default_factory=lambda: np.zeros(1))  # ascending step latencies, s
    level: np.ndarray = field(init=False)
    start: np.ndarray = field(init=False)
    exp: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self._g = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0xE3,)))
        self.level = self._g.random(EMULATED)  # quantile level of each emulated iteration's noise
        self.start = self._g.random(EMULATED)
        self.exp = self._g.standard_exponential((EMULATED, 32))

    def work(self, sigma: float) -> np.ndarray:
        """Each emulated iteration's time without congestion at ``sigma``: the simulated distribution's
        quantile at the iteration's fixed level (order statistics interpolated linearly, so a few
        dozen seeds give a continuous distribution), interpolated between the sigmas of the grid."""
        j = int(np.clip(np.searchsorted(self.sigmas, sigma), 1, self.sigmas.size - 1))
        w = (sigma - self.sigmas[j - 1]) / (self.sigmas[j] - self.sigmas[j - 1])
        rows = np.sort(self.library[j - 1:j + 1], axis=1)
        pos = self.level * (rows.shape[1] - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, rows.shape[1] - 1)
        f = pos - lo
        q = rows[:, lo] * (1 - f) + rows[:, hi] * f
        return (1 - w) * q[0] + w * q[1]

    def slowdown_at(self, bandwidth_factor: float, latency_s: float) -> float:
        """T(b, L) / T(1, 0), bilinear in (log b, L) on the simulated surface."""
        by_b = [float(np.interp(math.log(bandwidth_factor), self.log_b, self.slowdown[:, j]))
                for j in range(self.latency.size)]
        return float(np.interp(latency_s, self.latency, by_b))

    def samples(self, p: Params) -> np.ndarray:
        tau = self.work(p.sigma)
        if not p.congested:
            return tau
        slow = self.slowdown_at(p.bandwidth_factor, p.latency_s)
        off = float(p.mean_off_s)
        on_state = self.start < p.duty  # stationary start, as sim.jitter.congestion_process
        left = np.ones_like(tau)  # fraction of the iteration's work still to do
        t = np.zeros_like(tau)
        active = np.arange(tau.size)
        i = 0
        while active.size:
            if i >= self.exp.shape[1]:  # more periods than drawn: extend, the earlier draws unchanged
                self.exp = np.hstack([self.exp, self._g.standard_exponential((EMULATED, self.exp.shape[1]))])
            st = on_state[active]
            dur = self.exp[active, i] * np.where(st, p.mean_on_s, off)
            rate = 1.0 / (tau[active] * np.where(st, slow, 1.0))
            done = dur * rate >= left[active]
            fin = active[done]
            t[fin] += left[fin] / rate[done]
            go = active[~done]
            t[go] += dur[~done]
            left[go] -= dur[~done] * rate[~done]
            on_state[active] = ~st
            active = go
            i += 1
        return t


def library_simulations(n_layouts: int, check_n: int = CHECK_N) -> int:
    """Simulated iterations a fit reports through ``progress``: emulator runs plus the check."""
    return n_layouts * (len(LIB_SIGMAS) * LIB_SEEDS + len(B_GRID) * len(L_GRID) - 1 + check_n)


def build_emulator(layout: LayoutLog, fixed: Mapping[str, Any], seed: int, jobs: int,
                   progress: ProgressCallback | None) -> Emulator:
    seeds = child_seeds(seed, LIB_SEEDS)
    tasks: list[tuple[Jitter | None, list[int]]] = []
    for s in LIB_SIGMAS:
        tasks.append((parse_jitter(_merge(fixed, {"noise": {"nic": {"sigma": s}}})), seeds))
    grid = [(b, lat) for lat in L_GRID for b in B_GRID][1:]  # (1, 0) is the deterministic run
    for b, lat in grid:  # congested throughout: on for ~forever from t = 0
        cong = {"nic": {"bandwidth_factor": b, "mean_on_s": 1e12, "mean_off_s": 1e-12, "scope": "tier",
                        "latency_s": lat}}
        tasks.append((parse_jitter({"congestion": cong}), seeds[:1]))
    rows = run_tasks(tasks, layout.costs, layout.cluster, simulate=layout.simulate, jobs=jobs, progress=progress)
    library = np.vstack([r[:, 0] for r in rows[:len(LIB_SIGMAS)]])
    det = float(run_tasks([(None, seeds[:1])], layout.costs, layout.cluster, simulate=layout.simulate)[0][0, 0])
    times = np.array([det] + [float(r[0, 0]) for r in rows[len(LIB_SIGMAS):]]).reshape(len(L_GRID), len(B_GRID)).T
    order = np.argsort(B_GRID)
    return Emulator(np.asarray(LIB_SIGMAS), library, np.log(np.asarray(B_GRID)[order]), (times / det)[order], det,
                    seed, np.asarray(L_GRID))


# -- distances ----------------------------------------------------------------------------------------------


def _quantiles(x: np.ndarray) -> np.ndarray:
    return np.quantile(np.log(np.asarray(x, dtype=float)), _U, method="inverted_cdf")


def log_w1(measured: np.ndarray, simulated: np.ndarray) -> tuple[float, float]:
    """(W1 between the log-times after the best shift, that shift): scale-free, in log units (~relative)."""
    d = _quantiles(measured) - _quantiles(simulated)
    shift = float(np.median(d))
    return float(np.mean(np.abs(d - shift))), shift


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


# -- the fit ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutFit:
    """The goodness of fit on one layout, from the full simulation of the fitted parameters."""

    name: str
    label: str
    n_measured: int
    w1: float  # log_w1, measured vs simulated
    ks: float  # KS after the same shift
    ks_emulator: float  # KS between the emulator and the simulation (the emulator's own error)
    offset: float  # exp(shift): measured over simulated scale (the profile's error, not jitter)
    measured_mom: float  # mean over min of the measured times, %
    predicted_mom: float  # of the simulation, expected at n_measured iterations, %
    simulated_s: np.ndarray = field(repr=False)
    measured_s: np.ndarray = field(repr=False)
    averaged_over: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.name, "source": self.label, "n_measured": self.n_measured, "w1_log": self.w1,
                "ks": self.ks,
                "ks_emulator_vs_simulation": None if math.isnan(self.ks_emulator) else self.ks_emulator,
                "profile_offset": self.offset,
                "mean_over_min_measured_pct": self.measured_mom, "mean_over_min_predicted_pct": self.predicted_mom,
                "simulated_s": self.simulated_s.tolist(), "measured_s": self.measured_s.tolist()}


@dataclass(frozen=True)
class JointFit:
    params: Params
    mapping: dict[str, Any]  # simulation.jitter
    fixed: dict[str, Any]
    objective: float  # mean log-W1 of the emulator at the optimum
    layouts: tuple[LayoutFit, ...]
    evaluations: int
    seed: int

    @property
    def jitter(self) -> Jitter | None:
        return parse_jitter(self.mapping)

    def to_json(self) -> dict[str, Any]:
        p = self.params
        return {"fitted": {"noise.nic.sigma": p.sigma, "congestion.nic.bandwidth_factor": p.bandwidth_factor,
                           "congestion.nic.mean_on_s": p.mean_on_s, "congestion.nic.mean_off_s": p.mean_off_s,
                           "congestion.nic.duty": p.duty, "congestion.nic.latency_s": p.latency_s},
                "fixed": self.fixed, "objective_w1_log": self.objective, "evaluations": self.evaluations,
                "seed": self.seed, "layouts": [lf.to_json() for lf in self.layouts],
                "simulation": {"jitter": self.mapping}}


def _params(u: np.ndarray, t_ref: float) -> Params:
    """A point of the unit cube -> parameters (log scale for the factor and the length; a fifth
    coordinate, where present, is the step latency on [0, L_GRID[-1]])."""
    u = np.clip(u, 0.0, 1.0)
    lo_on, hi_on = (math.log(x * t_ref) for x in ON_RANGE)
    return Params(sigma=float(u[0] * LIB_SIGMAS[-1]), bandwidth_factor=float(math.exp(math.log(B_GRID[-1]) * u[1])),
                  mean_on_s=float(math.exp(lo_on + u[2] * (hi_on - lo_on))), duty=float(u[3] * MAX_DUTY),
                  latency_s=float(u[4] * L_GRID[-1]) if u.size > 4 else 0.0)


def fit_day(layouts: Sequence[LayoutLog], raw_jitter: Any = None, *, seed: int = 0, jobs: int = 1,
            check_n: int = CHECK_N, progress: ProgressCallback | None = None, step_latency: bool = True) -> JointFit:
    """Fit one parameter set to every layout's times jointly (see module doc); ``step_latency``:
    the episodes' latency per protocol step is fitted too (else held at 0: bandwidth only)."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    if not layouts:
        raise ConfigError("jitter fit", "no layout to fit")
    fixed = fixed_constants(raw_jitter)
    emus = [build_emulator(lay, fixed, seed, jobs, progress) for lay in layouts]
    targets = [_quantiles(lay.measured_s) for lay in layouts]
    t_ref = float(np.mean([e.deterministic_s for e in emus]))
    count = [0]

    def objective(u: np.ndarray) -> float:
        if np.any(u < 0) or np.any(u > 1):
            return 10.0 + float(np.sum(np.abs(u - np.clip(u, 0, 1))))
        count[0] += 1
        p = _params(u, t_ref)
        total = 0.0
        for emu, q in zip(emus, targets, strict=True):
            d = q - _quantiles(emu.samples(p))
            total += float(np.mean(np.abs(d - np.median(d))))
        return total / len(emus)

    dims = 5 if step_latency else 4
    design = qmc.Sobol(dims, scramble=True,
                       seed=np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x50,))))
    points = design.random(SEARCH_POINTS)
    values = np.array([objective(u) for u in points])
    best_u, best_v = points[int(np.argmin(values))], float(values.min())
    for start in points[np.argsort(values)[:4]]:
        res = minimize(objective, start, method="Nelder-Mead",
                       options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 300, "initial_simplex":
                                np.vstack([start] + [np.clip(start + 0.08 * e, 0, 1) for e in np.eye(dims)])})
        if res.fun < best_v:
            best_u, best_v = res.x, float(res.fun)
    # Parsimony: congestion the data cannot tell from its absence is left out (on Perlmutter an
    # episode barely slows the simulated layouts, so its parameters would be arbitrary). "Cannot
    # tell": the no-congestion fit is worse by less than the resampling spread (sd) of the distance
    # itself at the measured number of iterations.
    from scipy.optimize import minimize_scalar

    quiet = minimize_scalar(lambda s: objective(np.array([s] + [0.0] * (dims - 1))), bounds=(0.0, 1.0),
                            method="bounded", options={"xatol": 1e-3})
    noise_sd = resampling_sd([e.samples(_params(best_u, t_ref)) for e in emus],
                             [lay.measured_s.size for lay in layouts], seed)
    if float(quiet.fun) - best_v <= noise_sd:
        best_u, best_v = np.array([float(quiet.x)] + [0.0] * (dims - 1)), float(quiet.fun)
    params = _params(best_u, t_ref)
    mapping = params.mapping(fixed)
    jitter = parse_jitter(mapping)
    checks = []
    for lay, emu in zip(layouts, emus, strict=True):
        sim = run_monte_carlo(lay.costs, lay.cluster, jitter, check_n, seed=seed + 1, jobs=jobs, share_samples=0,
                              simulate=lay.simulate, progress=progress).samples_s
        checks.append(layout_fit(lay, sim, emu.samples(params), seed))
    return JointFit(params, mapping, fixed, best_v, tuple(checks), count[0], seed)


def resampling_sd(samples: Sequence[np.ndarray], sizes: Sequence[int], seed: int, reps: int = 60) -> float:
    """The sd of the mean distance when each layout's log is ``size`` draws of its model: how much the
    objective moves by chance alone."""
    g = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x5D,)))
    vals = [np.mean([log_w1(x[g.integers(0, x.size, n)], x)[0] for x, n in zip(samples, sizes, strict=True)])
            for _ in range(reps)]
    return float(np.std(vals))


def layout_fit(lay: LayoutLog, simulated: np.ndarray, emulated: np.ndarray | None, seed: int) -> LayoutFit:
    """Goodness of fit of simulated times against a layout's measured ones."""
    w1, shift = log_w1(lay.measured_s, simulated)
    m = lay.measured_s
    return LayoutFit(
        name=lay.name, label=lay.label, n_measured=int(m.size), w1=w1,
        ks=ks_distance(np.log(m), np.log(simulated) + shift),
        ks_emulator=ks_distance(emulated, simulated) if emulated is not None else math.nan,
        offset=math.exp(shift), measured_mom=100.0 * (m.mean() / m.min() - 1.0),
        predicted_mom=mean_over_min_at(simulated, int(m.size), seed), simulated_s=simulated, measured_s=m,
        averaged_over=lay.averaged_over)


UNITS = {"noise.nic.sigma": "per message, dimensionless (lognormal, mean 1)",
         "congestion.nic.bandwidth_factor": "capacity multiplier during an episode",
         "congestion.nic.mean_on_s": "s, mean episode length (exponential)",
         "congestion.nic.mean_off_s": "s, mean gap between episodes (exponential)",
         "congestion.nic.latency_s": "s added per protocol step of a transfer during an episode"}


def report(fit: JointFit) -> list[str]:
    """The fitted values with units, then the goodness of fit per layout."""
    p = fit.params
    lines = [f"fitted jointly on {len(fit.layouts)} layout(s), seed {fit.seed}, {fit.evaluations} emulated "
             f"candidates; mean log-W1 {fit.objective:.4f}"]
    vals = {"noise.nic.sigma": f"{p.sigma:.4f}"}
    if p.congested:
        rate = 60.0 / (p.mean_on_s + float(p.mean_off_s))
        vals.update({"congestion.nic.bandwidth_factor": f"{p.bandwidth_factor:.3f}",
                     "congestion.nic.mean_on_s": f"{p.mean_on_s:.2f}",
                     "congestion.nic.mean_off_s": f"{float(p.mean_off_s):.2f}",
                     "congestion.nic.latency_s": f"{p.latency_s:.2e}"})
        lines += [f"  {k:34} {v:>9}   {UNITS[k]}" for k, v in vals.items()]
        lines.append(f"  {'(episodes: duty, rate)':34} {p.duty:9.3f}   {rate:.2f} per minute, scope tier (fabric-wide)")
    else:
        lines += [f"  {k:34} {v:>9}   {UNITS[k]}" for k, v in vals.items()]
        lines.append("  no congestion episodes (the fit found none)")
    if fit.fixed:
        lines.append(f"  held fixed (scenario): {yaml.safe_dump(fit.fixed, default_flow_style=True).strip()}")
    lines.append("goodness of fit (full simulation of the fitted set; scale-free: times shifted by the profile offset)")
    lines.append(f"  {'layout':34} {'n':>4} {'W1(log)':>8} {'KS':>6} {'KS emu':>7} {'offset':>7} "
                 f"{'mean/min meas.':>15} {'pred. at n':>10}")
    for lf in fit.layouts:
        lines.append(f"  {lf.name:34} {lf.n_measured:4d} {lf.w1:8.4f} {lf.ks:6.3f} {lf.ks_emulator:7.3f} "
                     f"{lf.offset:7.3f} {lf.measured_mom:+14.1f}% {lf.predicted_mom:+9.1f}%")
        if lf.averaged_over > 1:
            lines.append(f"    (each logged value averages {lf.averaged_over} iterations: the measured spread is "
                         f"narrower than per-iteration)")
    return lines


def preset_text(fit: JointFit, command: str, sources: str) -> str:
    head = [f"# simulation.jitter fitted by `trainsim jitter fit` on {sources}", f"# command: {command}"]
    head += ["# " + line for line in report(fit)]
    return "\n".join(head) + "\n" + yaml.safe_dump({"simulation": {"jitter": fit.mapping}}, sort_keys=False)


# -- the former single-layout fit (two parameters, simulated method of moments), kept for the Python API ---

QUANTILES = (10, 25, 75, 90, 95)
SIGMA_GRID = (0.0, 0.1, 0.2, 0.35, 0.5)
DUTY_GRID = (0.0, 0.1, 0.25, 0.4, 0.6)
MAX_SIGMA, MAX_DUTY = 1.0, 0.9
MIN_TIMES = 20
NM_MAXITER = 40


def read_times(path: str) -> np.ndarray:
    """One column of seconds per line; an optional header; blank lines and ``#`` comments skipped."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(path, f"cannot read the times file: {e.strerror or e}") from None
    values: list[float] = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if len([c for c in cells if c]) != 1:
            raise ConfigError(f"{path}:{lineno}", f"expected one column of seconds, got {len(cells)} cells")
        cell = next(c for c in cells if c)
        try:
            v = float(cell)
        except ValueError:
            if not values and lineno == _first_data_line(text):
                continue  # a header
            raise ConfigError(f"{path}:{lineno}", f"not a number of seconds: {cell!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{path}:{lineno}", f"an iteration time must be positive seconds, got {cell!r}")
        values.append(v)
    if len(values) < MIN_TIMES:
        raise ConfigError(path, f"needs at least {MIN_TIMES} iteration times to fit, found {len(values)}")
    return np.asarray(values, dtype=float)


def _first_data_line(text: str) -> int:
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.strip().startswith("#"):
            return i
    return 0


def statistics(samples: np.ndarray) -> np.ndarray:
    """The scale-free moments the fit matches (see module doc)."""
    med = float(np.percentile(samples, 50))
    qs = np.percentile(samples, QUANTILES)
    return np.log(np.append(qs, samples.mean()) / med)


@dataclass(frozen=True)
class FitResult:
    jitter: Jitter
    mapping: dict[str, Any]  # simulation.jitter as written to the snippet
    sigma: float
    duty: float
    mean_on_s: float
    mean_off_s: float | None
    bandwidth_factor: float
    objective: float
    measured: tuple[float, ...]
    fitted: tuple[float, ...]
    n_times: int
    n_sim: int
    evaluations: int

    def to_json(self) -> dict[str, Any]:
        return {
            "fitted": {"noise.nic.sigma": self.sigma, "congestion.nic.duty": self.duty,
                       "congestion.nic.mean_off_s": self.mean_off_s},
            "fixed": {"congestion.nic.bandwidth_factor": self.bandwidth_factor,
                      "congestion.nic.mean_on_s": self.mean_on_s},
            "statistics": [f"log(p{q}/p50)" for q in QUANTILES] + ["log(mean/p50)"],
            "measured": list(self.measured), "simulated": list(self.fitted), "objective": self.objective,
            "n_times": self.n_times, "n_sim": self.n_sim, "evaluations": self.evaluations,
            "simulation": {"jitter": self.mapping},
        }


def _candidate(base: dict[str, Any], sigma: float, duty: float) -> dict[str, Any]:
    m = copy.deepcopy(base)
    m.setdefault("noise", {})["nic"] = {"sigma": float(sigma)}
    cong = m.setdefault("congestion", {})
    nic = dict(cong.get("nic") or {})
    if duty <= 0:
        cong.pop("nic", None)
    else:
        nic["mean_off_s"] = float(nic["mean_on_s"] * (1 - duty) / duty)
        cong["nic"] = nic
    if not cong:
        m.pop("congestion")
    return m


def _base_mapping(raw: Any) -> dict[str, Any]:
    """The scenario's jitter, preset expanded, with NIC congestion parameters to hold fixed."""
    jit = parse_jitter(raw) if raw else None
    base = jit.to_mapping() if jit is not None else copy.deepcopy(JITTER_PRESETS["vista"])
    preset_nic = JITTER_PRESETS["vista"]["congestion"]["nic"]
    nic = dict((base.get("congestion") or {}).get("nic") or preset_nic)
    nic.setdefault("scope", "link")
    base.setdefault("congestion", {})["nic"] = nic
    return base


def sims_per_candidate(n_times: int, n_sim: int | None = None) -> int:
    """Iterations simulated for each candidate (sigma, duty): ``n_sim``, else the times' count in [100, 300]."""
    return int(n_sim or min(max(n_times, 100), 300))


def fit_jitter(times: np.ndarray, costs: IterationCosts, cluster: ClusterSpec, raw_jitter: Any = None, *,
               seed: int = 0, jobs: int = 1, n_sim: int | None = None, simulate: Callable[..., Any] | None = None,
               progress: ProgressCallback | None = None) -> FitResult:
    """Fit NIC sigma and congestion duty (see module doc) to ``times`` (seconds).

    ``progress(k)``: k more simulated iterations done. The grid costs 25 x
    :func:`sims_per_candidate` of them; how many Nelder-Mead adds depends on the data
    (typically 10-40 more candidates), so the total is not known in advance.
    """
    from scipy.optimize import minimize

    times = np.asarray(times, dtype=float)
    base = _base_mapping(raw_jitter)
    nic = base["congestion"]["nic"]
    target = statistics(times)
    n = sims_per_candidate(times.size, n_sim)
    cache: dict[tuple[float, float], tuple[float, np.ndarray]] = {}

    def evaluate(sigma: float, duty: float) -> float:
        key = (round(float(sigma), 6), round(float(duty), 6))
        if key not in cache:
            jit = parse_jitter({k: v for k, v in _candidate(base, *key).items()})
            res = run_monte_carlo(costs, cluster, jit, n, seed=seed, jobs=jobs, share_samples=0,
                                  simulate=simulate, progress=progress)
            st = statistics(res.samples_s)
            cache[key] = (float(np.sum((st - target) ** 2)), st)
        return cache[key][0]

    best = min(((s, d) for s in SIGMA_GRID for d in DUTY_GRID), key=lambda p: evaluate(*p))

    def objective(x: np.ndarray) -> float:
        s, d = float(x[0]), float(x[1])
        if not (0 <= s <= MAX_SIGMA and 0 <= d <= MAX_DUTY):
            return 1e3 + abs(s) + abs(d)
        return evaluate(s, d)

    opt = minimize(objective, np.array(best, dtype=float), method="Nelder-Mead",
                   options={"xatol": 0.005, "fatol": 1e-7, "maxiter": NM_MAXITER,
                            "initial_simplex": np.array([best, (best[0] + 0.05, best[1]),
                                                         (best[0], best[1] + 0.05)])})
    sigma, duty = (float(v) for v in opt.x)
    if objective(opt.x) > evaluate(*best):
        sigma, duty = best
    sigma, duty = round(sigma, 4), round(duty, 4)
    mapping = _candidate(base, sigma, duty)
    jitter = parse_jitter(mapping)
    if jitter is None:
        raise ConfigError(FIELD, "the fit found no variance to explain (all parameters zero)")
    loss = evaluate(sigma, duty)
    return FitResult(
        jitter=jitter, mapping=mapping, sigma=sigma, duty=duty, mean_on_s=float(nic["mean_on_s"]),
        mean_off_s=float(nic["mean_on_s"] * (1 - duty) / duty) if duty > 0 else None,
        bandwidth_factor=float(nic["bandwidth_factor"]), objective=loss,
        measured=tuple(target.tolist()), fitted=tuple(cache[(round(sigma, 6), round(duty, 6))][1].tolist()),
        n_times=int(times.size), n_sim=n, evaluations=len(cache),
    )


def snippet(fit: FitResult, source: str) -> str:
    head = (f"# simulation.jitter fitted by `trainsim jitter fit` to {fit.n_times} iteration times from {source}\n"
            f"# fitted: noise.nic.sigma = {fit.sigma:g}, congestion duty = {fit.duty:g}"
            f" (mean_off_s); fixed: bandwidth_factor = {fit.bandwidth_factor:g}, mean_on_s = {fit.mean_on_s:g}\n"
            f"# objective (sum of squared log-quantile-ratio differences) = {fit.objective:.3g}\n")
    return head + yaml.safe_dump({"simulation": {"jitter": fit.mapping}}, sort_keys=False)
