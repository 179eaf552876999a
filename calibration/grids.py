"""Candidate grids for the per-operator model selection, importable without scikit-learn or xgboost
(a warm profile load checks which grid its cache was fitted with; calibration.select fits them)."""

from __future__ import annotations

#: The measured profiles' grid (sample directories; the reference profiles keep
#: calibration.select.DEFAULT_CANDIDATES, which the paper's reproduction was fitted with): a small
#: forest and a short, fast-learning boost. On the 75 h100-sxm-bf16 operator regressors (efficiency
#: targets, 25,962 samples) the selection's median validation MAPE is 5.94 % (mean 6.47 %) against
#: 6.00 % (6.37 %) for a 20-tree forest and 100 rounds at rate 0.3, fitted in 6.2 s instead of 9.2 s
#: on 2 threads: what brings a cold run of the default profile under 10 s (docs/benchmarks.md).
FAST_CANDIDATES: tuple[tuple[str, dict], ...] = (
    ("rforest", {"n_estimators": 16, "max_features": None, "min_samples_leaf": 2, "max_depth": 20}),
    ("xgboost", {"n_estimators": 70, "max_depth": 6, "learning_rate": 0.4, "subsample": 0.8,
                 "colsample_bytree": 1.0, "min_child_weight": 1}),
)
