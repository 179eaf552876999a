"""Measured collectives as a monotone curve: log(time) piecewise linear in log(size).

A tree regressor on the single feature ``entries`` is a step function: between two sampled
sizes it predicts one of their times, off by up to the ratio of the sizes (a factor of 1.4
at half-octave spacing). A collective's time is smooth and non-decreasing in its size
(latency-bound, then bandwidth-bound), so for a sample directory that measured each
collective group at several sizes, :class:`CollectiveCurve` fits, per group:

1. the median duration of each measured size (the per-call rows carry barrier-to-call skew
   and jitter that no size-based model can predict; the median is what is repeatable);
2. isotonic (non-decreasing) regression of log(median) over the sizes, by pool-adjacent-
   violators: NCCL's protocol switches and noise make a few medians dip below a smaller
   size's, and a predictor that says a larger message is faster is wrong for the simulator;
3. linear interpolation of that in log(entries), evaluated by :class:`LogLogCurve`.

Outside the measured sizes: below the smallest, its time (the latency floor); above the
largest, the time grows with the size at the largest size's bus bandwidth (slope 1 in
log-log). Both are extrapolation and the profile warns with the sampled range.

All-gather and reduce-scatter shards that are not a multiple of 16 bytes (``align_entries``
= 8 two-byte entries) run in a slower NCCL regime: on the measured H200s the half-octave
shards (odd or 4-byte-aligned element counts) took up to 1.7x the time of the next *larger*
power-of-two shard (docs/multi_gpu.md, "Collective curves"). Training frameworks pad their
communication buffers to avoid it (Megatron-core pads each bucket to a multiple of
``lcm(dp, 128)`` elements, or ``2**16`` for "high NCCL bus bandwidth"), so the curve is
fitted on the aligned sizes when there are enough of them and predicts the aligned regime;
the unaligned sizes' error against it is kept in ``unaligned_error_pct_``.

The estimator follows scikit-learn's contract (parameters in ``__init__``, ``fit`` returning
self, fitted attributes ending in ``_``, ``get_params``/``set_params``) without importing it:
a cached profile evaluates curves on the warm path, where scikit-learn's import (about a
second) is not paid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CURVE_KIND = "curve"
#: bumped whenever the fit changes what a curve predicts, so cached profiles are refitted
CURVE_VERSION = 1
#: fewer distinct sizes than this per group and a curve is not chosen (the trees are)
MIN_SIZES = 4
#: entries (2 bytes each) an all-gather / reduce-scatter shard must be a multiple of to be "aligned"
ALIGN_ENTRIES = 8
#: held-out errors are reported separately below this size: small messages are latency-,
#: skew- and protocol-switch-dominated, the regime the brief asks to report apart
LARGE_BYTES = 64 * 1024


class NotFittedError(ValueError, AttributeError):
    """Same bases as scikit-learn's ``NotFittedError``, so callers catching either work."""


@dataclass(frozen=True, eq=False)
class LogLogCurve:
    """A fitted curve as two arrays; what a cached profile stores and evaluates (numpy only).

    ``log_entries``: strictly increasing knots, log of the entry count; ``log_us``: non-decreasing
    log microseconds at the knots.
    """

    log_entries: np.ndarray
    log_us: np.ndarray
    kind: str = CURVE_KIND

    def __post_init__(self) -> None:
        x, y = np.asarray(self.log_entries, dtype=np.float64), np.asarray(self.log_us, dtype=np.float64)
        if x.ndim != 1 or x.shape != y.shape or x.size < 1:
            raise ValueError(f"knots and values must be equal-length 1-D arrays, got {x.shape} and {y.shape}")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("non-finite knots or values")
        if (np.diff(x) <= 0).any() or (np.diff(y) < 0).any():
            raise ValueError("knots must increase and values must not decrease")

    @property
    def n_features(self) -> int:
        return 1

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Microseconds for an (n, 1) array of entry counts."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != 1:
            raise ValueError(f"expected an (n, 1) array, got shape {X.shape}")
        x = X[:, 0]
        if not (np.isfinite(x).all() and (x > 0).all()):
            raise ValueError("entries must be positive and finite")
        lx = np.log(x)
        # np.interp holds the first value below the first knot: the latency floor.
        ly = np.interp(lx, self.log_entries, self.log_us)
        above = lx > self.log_entries[-1]
        # constant bandwidth beyond the largest size: time proportional to size, slope 1
        ly[above] = self.log_us[-1] + (lx[above] - self.log_entries[-1])
        return np.exp(ly)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"log_entries": np.ascontiguousarray(self.log_entries, dtype=np.float64),
                "log_us": np.ascontiguousarray(self.log_us, dtype=np.float64),
                "meta": np.array(json.dumps({"kind": self.kind}))}

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any]) -> LogLogCurve:
        return cls(np.asarray(arrays["log_entries"], dtype=np.float64), np.asarray(arrays["log_us"], dtype=np.float64))


def isotonic(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit of ``y`` (equal weights), pool-adjacent-violators."""
    values: list[float] = []
    counts: list[int] = []
    for v in np.asarray(y, dtype=np.float64):
        values.append(float(v))
        counts.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            v2, n2 = values.pop(), counts.pop()
            v1, n1 = values.pop(), counts.pop()
            values.append((v1 * n1 + v2 * n2) / (n1 + n2))
            counts.append(n1 + n2)
    return np.repeat(values, counts)


def per_size_medians(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """(distinct entry counts, ascending; median duration of each), after checking the inputs."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 1:
        raise ValueError(f"X must be an (n, 1) array of entry counts, got shape {X.shape}")
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have one duration per row of X ({X.shape[0]}), got shape {y.shape}")
    if not (np.isfinite(X).all() and (X > 0).all()):
        raise ValueError("entries must be positive and finite")
    if not (np.isfinite(y).all() and (y > 0).all()):
        raise ValueError("durations must be positive and finite")
    sizes, inverse = np.unique(X[:, 0], return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    medians = np.array([np.median(chunk) for chunk in np.split(y[order], bounds)])
    return sizes, medians


def alternate(sizes: np.ndarray) -> np.ndarray:
    """Held-out mask: every second size, never the first or the last (so held-out sizes are
    interpolated, not extrapolated). On half-octave sizes starting at a power of two these are
    exactly the half-octave ones."""
    mask = np.zeros(len(sizes), dtype=bool)
    mask[1:-1:2] = True
    return mask


def error_summary(sizes: np.ndarray, error_pct: np.ndarray, large_bytes: int = LARGE_BYTES) -> dict[str, Any]:
    """MAPE and largest |error| in percent over all, large (>= ``large_bytes``) and small sizes."""
    big = 2 * np.asarray(sizes) >= large_bytes
    out: dict[str, Any] = {}
    for name, sel in (("all", np.ones(len(sizes), dtype=bool)), ("large", big), ("small", ~big)):
        e = np.abs(np.asarray(error_pct)[sel])
        out[name] = {"n": int(e.size), "mape_pct": float(e.mean()) if e.size else None,
                     "max_pct": float(e.max()) if e.size else None}
    return out


class CollectiveCurve:
    """Monotone log-log interpolation of one collective group's per-size median durations.

    Parameters: ``align_entries`` (None: every size is fitted; k: sizes that are not a multiple
    of k entries are left out when at least ``min_sizes`` others remain), ``min_sizes``.

    ``fit(X, y)``: X an (n, 1) array of entry counts, y the durations in microseconds, one row
    per timed call. Fitted attributes: ``sizes_`` and ``medians_us_`` (the fitted sizes and their
    medians), ``curve_`` (:class:`LogLogCurve`), ``feature_min_``/``feature_max_`` (the fitted
    range, shape (1,)), ``n_samples_``, ``n_features_in_``, ``excluded_sizes_`` and
    ``unaligned_error_pct_`` (sizes left out for alignment and the curve's signed error on their
    medians), ``held_out_`` (errors of a fit without every second fitted size, on the left-out
    sizes: :func:`alternate`, summarised by :func:`error_summary`), ``validation_mape_`` (its
    MAPE over all held-out sizes, percent; NaN with fewer than 3 sizes).
    """

    def __init__(self, align_entries: int | None = None, min_sizes: int = MIN_SIZES) -> None:
        self.align_entries = align_entries
        self.min_sizes = min_sizes

    # scikit-learn's parameter protocol, so sklearn.base.clone and grid searches accept it
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"align_entries": self.align_entries, "min_sizes": self.min_sizes}

    def set_params(self, **params: Any) -> CollectiveCurve:
        for key, value in params.items():
            if key not in ("align_entries", "min_sizes"):
                raise ValueError(f"invalid parameter {key!r} for CollectiveCurve")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        return f"CollectiveCurve(align_entries={self.align_entries!r}, min_sizes={self.min_sizes!r})"

    def __sklearn_tags__(self) -> Any:
        # scikit-learn >= 1.6 asks every estimator for its tags (clone, check_is_fitted); its
        # BaseEstimator would provide them but importing it here would put scikit-learn on the
        # warm path, so they are built on demand, when scikit-learn is in use anyway.
        from sklearn.utils import RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True),
                    regressor_tags=RegressorTags())

    def _choose(self, sizes: np.ndarray) -> np.ndarray:
        if self.min_sizes < 2:
            raise ValueError(f"min_sizes must be >= 2, got {self.min_sizes!r}")
        if self.align_entries:
            aligned = sizes % self.align_entries == 0
            if aligned.sum() >= self.min_sizes:
                return aligned
        return np.ones(len(sizes), dtype=bool)

    def fit(self, X: Any, y: Any) -> CollectiveCurve:
        sizes, medians = per_size_medians(X, y)
        use = self._choose(sizes)
        if use.sum() < self.min_sizes:
            raise ValueError(f"a collective curve needs at least {self.min_sizes} distinct sizes, got {int(use.sum())}")
        self.sizes_ = sizes[use]
        self.medians_us_ = medians[use]
        self.curve_ = LogLogCurve(np.log(self.sizes_), isotonic(np.log(self.medians_us_)))
        self.feature_min_ = self.sizes_[:1].copy()
        self.feature_max_ = self.sizes_[-1:].copy()
        self.n_samples_ = int(np.asarray(y).shape[0])
        self.n_features_in_ = 1
        self.excluded_sizes_ = sizes[~use]
        self.unaligned_error_pct_ = (self.curve_.predict(self.excluded_sizes_[:, None]) / medians[~use] - 1) * 100
        # held-out check on the fitted sizes only (the aligned regime the curve predicts)
        hold = alternate(self.sizes_)
        if hold.any():
            sub = LogLogCurve(np.log(self.sizes_[~hold]), isotonic(np.log(self.medians_us_[~hold])))
            err = (sub.predict(self.sizes_[hold][:, None]) / self.medians_us_[hold] - 1) * 100
            self.held_out_ = {"sizes": self.sizes_[hold], "error_pct": err, **error_summary(self.sizes_[hold], err)}
            self.validation_mape_ = float(np.mean(np.abs(err)))
        else:
            self.held_out_ = {"sizes": self.sizes_[:0], "error_pct": np.zeros(0), **error_summary(self.sizes_[:0],
                                                                                                  np.zeros(0))}
            self.validation_mape_ = float("nan")
        return self

    def predict(self, X: Any) -> np.ndarray:
        if not hasattr(self, "curve_"):
            raise NotFittedError("this CollectiveCurve is not fitted yet; call fit(X, y) first")
        return self.curve_.predict(np.asarray(X, dtype=np.float64))

    def summary_params(self) -> dict[str, Any]:
        """What ``trainsim profile show`` prints in the params column (rounded: it is a report)."""
        h = self.held_out_

        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 1)

        out: dict[str, Any] = {"sizes": int(self.sizes_.size), "held_out": h["all"]["n"],
                               "mape_ge_64KiB": r(h["large"]["mape_pct"]), "max_ge_64KiB": r(h["large"]["max_pct"]),
                               "mape_lt_64KiB": r(h["small"]["mape_pct"]), "max_lt_64KiB": r(h["small"]["max_pct"])}
        if self.excluded_sizes_.size:
            out["unaligned_left_out"] = int(self.excluded_sizes_.size)
            out["unaligned_median_err"] = r(float(np.median(self.unaligned_error_pct_)))
        return out


def holdout(X: Any, y: Any, test: Callable[[np.ndarray], np.ndarray], **params: Any) -> dict[str, Any]:
    """Fit on the sizes ``test(sizes)`` does not select, predict the medians of those it does.

    Returns the held-out sizes, their signed errors in percent and :func:`error_summary`. The
    docs' check is ``test = lambda s: (s & (s - 1)) != 0`` on the measured tables: fit on the
    whole-octave (power-of-two) sizes, predict the half-octave ones.
    """
    sizes, medians = per_size_medians(X, y)
    held = np.asarray(test(sizes), dtype=bool)
    X = np.asarray(X, dtype=np.float64)
    train = ~np.isin(X[:, 0], sizes[held])
    model = CollectiveCurve(**params).fit(X[train], np.asarray(y, dtype=np.float64)[train])
    err = (model.predict(sizes[held][:, None]) / medians[held] - 1) * 100
    return {"sizes": sizes[held], "error_pct": err, **error_summary(sizes[held], err)}


def merge_tables(inputs: Sequence[str | os.PathLike], out: str | os.PathLike) -> int:
    """Concatenate measured ``collectives.csv`` files (collectives_bench's output) into ``out``.

    Every input is read and validated through :func:`calibration.samples.read_collectives`; rows
    are kept as measured, one per timed call, with their ``iteration`` (empty where an input has
    none). The output's durations are written as ``repr(float)``, as the bench writes them, so
    merging bench files reproduces their bytes. Returns the number of rows written.
    """
    import csv

    from trainsim.calibration.samples import COLLECTIVE_COLUMNS, OPTIONAL_COLUMN, collective_row, read_collectives

    rows = [s for path in inputs for s in read_collectives(path)]
    if not rows:
        raise ValueError("no rows in " + ", ".join(map(str, inputs)))
    target = Path(out)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*COLLECTIVE_COLUMNS, OPTIONAL_COLUMN])
        for s in rows:
            w.writerow([*collective_row(s), "" if s.iteration is None else str(s.iteration)])
    os.replace(tmp, target)
    return len(rows)
