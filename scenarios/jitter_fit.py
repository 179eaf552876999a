"""``trainsim jitter fit``: fit jitter parameters to measured per-iteration times.

What is fitted: the NIC-tier noise ``sigma`` (one value for every traffic kind) and the
NIC congestion *duty cycle* ``d = mean_on_s / (mean_on_s + mean_off_s)``, reported as
``mean_off_s``. Held fixed, from the scenario's jitter (or the ``vista`` preset when the
scenario has none): ``bandwidth_factor``, ``mean_on_s``, the congestion scope, the
NVLink noise and the compute jitter. Three or more free parameters are not identifiable
from a few hundred iteration times; these two are (noise widens the body of the
distribution, congestion fattens its right tail).

Method: simulated method of moments with common random numbers. The statistics are
scale-free (the simulator's absolute time may be off by the profile's error):
``log(q / p50)`` for the 10th, 25th, 75th, 90th and 95th percentiles and for the mean.
Every candidate is simulated with the same seeds (and :mod:`sim.jitter` keys its random
streams, so a candidate's draws line up with its neighbours'), which makes the objective
smooth enough for a coarse grid followed by Nelder-Mead (scipy).
"""

from __future__ import annotations

import copy
import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.montecarlo import run_monte_carlo
from trainsim.scenarios.progress import ProgressCallback
from trainsim.sim.costs import IterationCosts
from trainsim.sim.jitter import FIELD, Jitter
from trainsim.sim.jitter_config import JITTER_PRESETS, parse_jitter
from trainsim.topology import ClusterSpec

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
