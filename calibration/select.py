"""Per-operator model selection: RandomForest vs XGBoost on an 80/20 split, then refit on all.

This follows the reference implementation's procedure (pick the model family and
its hyper-parameters by validation error, refit the winner on every sample) with a
deliberately small grid: the reference searches hundreds of configurations per
operator; four keep a whole cluster's cold fit well under a minute on two cores and
the flattened ensembles small (``min_samples_leaf >= 2`` roughly halves a forest's
nodes against fully grown trees at a validation-MAPE cost below our noise; see
docs/benchmarks.md "Profiles").

Monotone constraints (``OperatorRegressor(monotonic_cst=...)``, derived from the feature names by
:func:`monotone_constraints`): a measured profile's trees may otherwise price more work as less
time, because bootstrap/boosting noise between two sampled shapes decides which leaf a shape
falls in (the h100-sxm-bf16 profile priced ``hf_dense`` forward 0.107 ms at b = 4 and 0.090 ms at
b = 8). Both learners then split only where the leaf values keep the constrained directions
(scikit-learn's ``monotonic_cst``, XGBoost's ``monotone_constraints``); docs/h100.md gives the
effect on the validations.

Constrained trees are fitted on log durations (``log_target``). A constraint bounds every leaf
below a split on a constrained feature by the split's mid value; on raw durations, which are
products of the sizes (a GEMM's time ~ b*l * d * 3d/mp), a first split on ``b*l`` capped the
small-token, large-d leaves far below their samples, and boosted leaves summed to negative
durations. Logs turn the product into a sum, which monotone trees fit; on the h100-sxm-bf16
Megatron kinds, which have no work-product feature, the validation MAPE of constrained
``linear1`` forward went from 217 % on raw durations to 24 % (30 % unconstrained, raw).

Imports scikit-learn and xgboost: only the fitting path uses this module.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y
from xgboost import XGBRegressor

from trainsim.calibration.grids import FAST_CANDIDATES  # noqa: F401 - the measured profiles' grid, re-exported

#: (family, hyper-parameters). Families: "rforest", "xgboost".
DEFAULT_CANDIDATES: tuple[tuple[str, dict], ...] = (
    ("rforest", {"n_estimators": 40, "max_features": None, "min_samples_leaf": 2, "max_depth": 24}),
    ("rforest", {"n_estimators": 40, "max_features": None, "min_samples_leaf": 4, "max_depth": 24}),
    ("xgboost", {"n_estimators": 300, "max_depth": 6, "learning_rate": 0.1, "subsample": 0.8,
                 "colsample_bytree": 1.0, "min_child_weight": 1}),
    ("xgboost", {"n_estimators": 300, "max_depth": 4, "learning_rate": 0.2, "subsample": 0.8,
                 "colsample_bytree": 1.0, "min_child_weight": 1}),
)

MIN_SAMPLES_FOR_SPLIT = 10  # below this the 20% holds too few rows to rank candidates

# A size symbol, optionally with an integer factor ("3d", "4d"): b, l, d, h, v, f of ops.Op, and
# qkv (the QKV projection's output width, 3d with multi-head attention).
_SIZE = r"\d*(?:qkv|[bldhvf])"
# A product of sizes, optionally divided by mp: the per-tensor-parallel-rank share of a size
# ("b*l", "v/mp", "3d/mp", "b*h/mp", "b*l*d*v/mp", "d*f/mp").
_WORK_RE = re.compile(rf"{_SIZE}(\*{_SIZE})*(/mp)?")
# Counts of work that are not products of shape symbols.
_COUNTS = frozenset({
    "params",  # hf_grad_accum / hf_optimizer: parameters touched per step
    "encoders",  # Megatron optimizer kinds: layers on the stage
    "entries",  # collectives: elements moved
})


def monotone_sign(name: str) -> int:
    """The direction a duration must move in as feature ``name`` grows, others held fixed.

    +1 for an amount of work or a size, -1 for the tensor-parallel degree alone, 0 where the
    direction is not a matter of work. Raises ``ValueError`` for a name it does not know, so a
    new feature is classified on purpose rather than silently left free.
    """
    if name == "d/h":
        # the head dimension: hf_attention carries its work in b*l*l*d/mp, so at fixed work a
        # longer head is a different kernel tiling, faster or slower; in the Megatron kinds it
        # takes two values only (64, 128), where a constraint buys nothing
        return 0
    if name == "mp":
        # the optimizer kinds' (mp, d, encoders): at fixed d and layers, more ranks leave fewer
        # parameters per rank
        return -1
    if name in _COUNTS:
        return 1
    if _WORK_RE.fullmatch(name):
        # sizes and their products (per rank when divided by mp): each is more elements or more
        # multiply-adds when it alone grows (a divisor other than mp, like d/h, does not match)
        return 1
    raise ValueError(f"no monotone direction known for feature {name!r}; add it to monotone_sign")


def monotone_constraints(names: Sequence[str]) -> tuple[int, ...]:
    """One :func:`monotone_sign` per feature name, in order (an ``ops.FEATURE_NAMES`` entry)."""
    return tuple(monotone_sign(n) for n in names)


def mape(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    y_true = np.asarray(y_true, dtype=float)
    return float(np.mean(np.abs(np.asarray(y_pred) - y_true) / np.abs(y_true)) * 100.0)


def make_model(kind: str, params: dict, random_state: int, n_jobs: int = 1,
               monotonic_cst: Sequence[int] | None = None):
    """A library regressor; ``monotonic_cst`` (-1/0/+1 per feature) constrains its trees.

    No constraint (None or all zeros) passes nothing to the library, so an unconstrained fit is
    exactly the one made before constraints existed (the reference profiles depend on that).
    """
    extra: dict = {}
    if monotonic_cst is not None and any(monotonic_cst):
        cst = [int(c) for c in monotonic_cst]
        extra = {"monotonic_cst": cst} if kind == "rforest" else {"monotone_constraints": tuple(cst)}
    if kind == "rforest":
        return RandomForestRegressor(**params, random_state=random_state, n_jobs=n_jobs, **extra)
    if kind == "xgboost":
        return XGBRegressor(**params, random_state=random_state, n_jobs=n_jobs, tree_method="hist",
                            objective="reg:squarederror", **extra)
    raise ValueError(f"unknown model family {kind!r}; use 'rforest' or 'xgboost'")


class OperatorRegressor(RegressorMixin, BaseEstimator):
    """Pick the candidate with the lowest validation MAPE, then refit it on all data.

    Fitted attributes: ``best_kind_``, ``best_params_``, ``validation_mape_`` (percent;
    NaN when there were too few samples to hold any out, in which case the first
    candidate is used), ``candidate_mape_`` (one per candidate), ``feature_min_``,
    ``feature_max_``, ``n_samples_``, ``estimator_`` (the refitted library model).

    ``monotonic_cst``: None (unconstrained) or one of -1, 0, +1 per feature, as scikit-learn's
    ``monotonic_cst``; every candidate is fitted under it, so the selection compares constrained
    models (see :func:`monotone_constraints`). ``log_target``: fit log(duration) and predict its
    exponential (the selection's MAPE is still on durations); see the module doc for why the
    constrained fits need it.

    ``selection``: None (select), or ``(best, candidate_mape)`` recorded by an earlier selection on
    the same samples, grid and ``random_state`` (calibration.selection_record): the candidates are
    not fitted again, the recorded scores become ``candidate_mape_`` and only candidate ``best`` is
    fitted, on all data. The estimator is then the one the selection would refit.
    """

    def __init__(self, candidates=None, test_size: float = 0.2, random_state: int = 0, n_jobs: int = 1,
                 monotonic_cst: Sequence[int] | None = None, log_target: bool = False,
                 selection: tuple[int, Sequence[float | None]] | None = None):
        self.candidates = candidates
        self.test_size = test_size
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.monotonic_cst = monotonic_cst
        self.log_target = log_target
        self.selection = selection

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=np.float64, y_numeric=True)
        self.n_features_in_ = X.shape[1]
        cst = None
        if self.monotonic_cst is not None:
            cst = tuple(int(c) for c in self.monotonic_cst)
            if len(cst) != X.shape[1] or any(c not in (-1, 0, 1) for c in cst):
                raise ValueError(f"monotonic_cst must hold one of -1, 0, 1 per feature ({X.shape[1]}), "
                                 f"got {self.monotonic_cst!r}")
        if np.any(y <= 0):
            raise ValueError("durations must be positive for a MAPE-based selection")
        cands = list(self.candidates if self.candidates is not None else DEFAULT_CANDIDATES)
        if not cands:
            raise ValueError("no candidates")
        # durations are positive (checked above), so their logs are finite
        fwd, inv = (np.log, np.exp) if self.log_target else (_identity, _identity)
        scores: list[float] = []
        if self.selection is not None:
            best, recorded = self.selection
            if not (isinstance(best, int) and 0 <= best < len(cands)) or len(recorded) != len(cands):
                raise ValueError(f"selection {self.selection!r} does not fit {len(cands)} candidates")
            scores = [math.nan if s is None else float(s) for s in recorded]
        elif len(y) >= MIN_SAMPLES_FOR_SPLIT:
            Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=self.test_size, random_state=self.random_state)
            for kind, params in cands:
                m = make_model(kind, params, self.random_state, self.n_jobs, cst).fit(Xtr, fwd(ytr))
                scores.append(mape(yva, inv(m.predict(Xva))))
            best = int(np.argmin(scores))
        else:
            scores = [math.nan] * len(cands)
            best = 0
        self.candidate_mape_ = scores
        self.best_kind_, params = cands[best]
        self.best_params_ = dict(params)
        self.validation_mape_ = scores[best]
        self.feature_min_ = X.min(axis=0)
        self.feature_max_ = X.max(axis=0)
        self.n_samples_ = len(y)
        self.estimator_ = make_model(self.best_kind_, self.best_params_, self.random_state, self.n_jobs,
                                     cst).fit(X, fwd(y))
        return self

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        X = check_array(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the regressor was fitted with {self.n_features_in_}")
        out = np.asarray(self.estimator_.predict(X), dtype=np.float64)
        return np.exp(out) if self.log_target else out

    def to_ensemble(self):
        """The refitted model as a numpy :class:`calibration.forest.TreeEnsemble`."""
        from trainsim.calibration.forest import from_fitted

        check_is_fitted(self, "estimator_")
        ens = from_fitted(self.estimator_)
        return dataclasses.replace(ens, log_target=True) if self.log_target else ens


def _identity(a: np.ndarray) -> np.ndarray:
    return a
