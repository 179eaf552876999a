"""Per-operator model selection: RandomForest vs XGBoost on an 80/20 split, then refit on all.

This follows the reference implementation's procedure (pick the model family and
its hyper-parameters by validation error, refit the winner on every sample) with a
deliberately small grid: the reference searches hundreds of configurations per
operator; four keep a whole cluster's cold fit well under a minute on two cores and
the flattened ensembles small (``min_samples_leaf >= 2`` roughly halves a forest's
nodes against fully grown trees at a validation-MAPE cost below our noise; see
docs/benchmarks.md "Profiles").

Imports scikit-learn and xgboost: only the fitting path uses this module.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y
from xgboost import XGBRegressor

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


def mape(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    y_true = np.asarray(y_true, dtype=float)
    return float(np.mean(np.abs(np.asarray(y_pred) - y_true) / np.abs(y_true)) * 100.0)


def make_model(kind: str, params: dict, random_state: int, n_jobs: int = 1):
    if kind == "rforest":
        return RandomForestRegressor(**params, random_state=random_state, n_jobs=n_jobs)
    if kind == "xgboost":
        return XGBRegressor(**params, random_state=random_state, n_jobs=n_jobs, tree_method="hist",
                            objective="reg:squarederror")
    raise ValueError(f"unknown model family {kind!r}; use 'rforest' or 'xgboost'")


class OperatorRegressor(RegressorMixin, BaseEstimator):
    """Pick the candidate with the lowest validation MAPE, then refit it on all data.

    Fitted attributes: ``best_kind_``, ``best_params_``, ``validation_mape_`` (percent;
    NaN when there were too few samples to hold any out, in which case the first
    candidate is used), ``candidate_mape_`` (one per candidate), ``feature_min_``,
    ``feature_max_``, ``n_samples_``, ``estimator_`` (the refitted library model).
    """

    def __init__(self, candidates=None, test_size: float = 0.2, random_state: int = 0, n_jobs: int = 1):
        self.candidates = candidates
        self.test_size = test_size
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=np.float64, y_numeric=True)
        self.n_features_in_ = X.shape[1]
        if np.any(y <= 0):
            raise ValueError("durations must be positive for a MAPE-based selection")
        cands = list(self.candidates if self.candidates is not None else DEFAULT_CANDIDATES)
        if not cands:
            raise ValueError("no candidates")
        scores: list[float] = []
        if len(y) >= MIN_SAMPLES_FOR_SPLIT:
            Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=self.test_size, random_state=self.random_state)
            for kind, params in cands:
                m = make_model(kind, params, self.random_state, self.n_jobs).fit(Xtr, ytr)
                scores.append(mape(yva, m.predict(Xva)))
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
        self.estimator_ = make_model(self.best_kind_, self.best_params_, self.random_state, self.n_jobs).fit(X, y)
        return self

    def predict(self, X):
        check_is_fitted(self, "estimator_")
        X = check_array(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the regressor was fitted with {self.n_features_in_}")
        return np.asarray(self.estimator_.predict(X), dtype=np.float64)

    def to_ensemble(self):
        """The refitted model as a numpy :class:`calibration.forest.TreeEnsemble`."""
        from trainsim.calibration.forest import from_fitted

        check_is_fitted(self, "estimator_")
        return from_fitted(self.estimator_)
