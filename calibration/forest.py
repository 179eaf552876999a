"""A compact numpy evaluator for fitted tree ensembles (RandomForest, XGBoost).

A cached profile is loaded and evaluated without importing scikit-learn or xgboost
(their imports alone cost about a second). Every tree is flattened into per-node
arrays; all trees of an ensemble share one set of arrays, ``roots`` giving each
tree's first node.

Split semantics are normalised at conversion time to "go left iff
``float32(x[feature]) <= threshold``" with a float32 threshold:

* scikit-learn casts inputs to float32 and compares ``x <= t`` with a float64
  midpoint ``t``; storing the largest float32 not above ``t`` gives the same answer
  for every float32 ``x``.
* xgboost compares ``x < t`` in float32; ``x < t`` equals ``x <= nextafter(t, -inf)``
  for float32 ``x``.

Leaves carry their value; a forest's prediction is the mean of its trees, a boosted
ensemble's is ``base_score`` plus the sum of its trees, accumulated in float32 in
tree order as xgboost does (so the two agree to float32 rounding, not just roughly).
An ensemble fitted on log durations (``log_target``, the monotone fits of
:mod:`calibration.select`) returns the exponential of that.
Missing values are not supported: the caller rejects NaN inputs.

This module must not import sklearn/xgboost at module level.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_ARRAYS = ("feature", "threshold", "left", "right", "value", "roots")


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Flattened trees. ``feature`` is -1 at leaves; leaves point ``left``/``right`` at themselves."""

    feature: np.ndarray  # int16
    threshold: np.ndarray  # float32, go left iff float32(x) <= threshold
    left: np.ndarray  # int32
    right: np.ndarray  # int32
    value: np.ndarray  # float32 leaf values (0 at internal nodes)
    roots: np.ndarray  # int32, first node of each tree
    kind: str  # "rforest" (mean of trees) or "xgboost" (base + float32 sum)
    base: float = 0.0
    depth: int = 0  # the deepest root-to-leaf path, in edges
    n_features: int = 0
    log_target: bool = False  # fitted on log(duration): predict exp(ensemble)

    @property
    def n_trees(self) -> int:
        return int(self.roots.size)

    @property
    def n_nodes(self) -> int:
        return int(self.feature.size)

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"expected an (n, {self.n_features}) array, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("non-finite feature values")
        x32 = X.astype(np.float32)
        n = x32.shape[0]
        if n == 0:
            return np.zeros(0)
        node = np.broadcast_to(self.roots, (n, self.n_trees)).copy()
        rows = np.arange(n)[:, None]
        feat = np.maximum(self.feature, 0)  # leaves read column 0 and then stay put
        for _ in range(self.depth):
            go_left = x32[rows, feat[node]] <= self.threshold[node]
            node = np.where(go_left, self.left[node], self.right[node])
        leaves = self.value[node]  # (n, trees) float32
        if self.kind == "rforest":
            out = leaves.astype(np.float64).sum(axis=1) / self.n_trees
        else:
            acc = np.full(n, self.base, dtype=np.float32)
            for t in range(self.n_trees):  # xgboost's order and precision
                acc += leaves[:, t]
            out = acc.astype(np.float64)
        # exp is increasing, so a monotone ensemble stays monotone (and its durations positive)
        return np.exp(out) if self.log_target else out

    # ------------------------------------------------------------------ persistence

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        out = {prefix + k: getattr(self, k) for k in _ARRAYS}
        meta = {"kind": self.kind, "base": self.base, "depth": self.depth, "n_features": self.n_features}
        if self.log_target:  # only when set: a linear ensemble's meta (and cache) stays as before
            meta["log_target"] = True
        out[prefix + "meta"] = np.array(json.dumps(meta))
        return out

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "") -> TreeEnsemble:
        meta = json.loads(str(arrays[prefix + "meta"]))
        return cls(**{k: np.asarray(arrays[prefix + k]) for k in _ARRAYS}, **meta)

    def save(self, path: str | os.PathLike) -> None:
        np.savez_compressed(path, **self.to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike) -> TreeEnsemble:
        with np.load(Path(path), allow_pickle=False) as z:
            return cls.from_arrays(z)


def _float32_at_most(t: np.ndarray) -> np.ndarray:
    """The largest float32 that is <= t (elementwise, t float64)."""
    t32 = t.astype(np.float32)
    over = t32.astype(np.float64) > t
    t32[over] = np.nextafter(t32[over], np.float32(-np.inf))
    return t32


def _depths(left: np.ndarray, right: np.ndarray, roots: np.ndarray, leaf: np.ndarray) -> int:
    depth = np.zeros(left.size, dtype=np.int64)
    best = 0
    stack = [int(r) for r in roots]
    while stack:
        i = stack.pop()
        if not leaf[i]:
            for c in (int(left[i]), int(right[i])):
                depth[c] = depth[i] + 1
                best = max(best, int(depth[c]))
                stack.append(c)
    return best


def _assemble(trees: list[tuple[np.ndarray, ...]], kind: str, base: float, n_features: int) -> TreeEnsemble:
    """Concatenate per-tree (feature, threshold32, left, right, value) arrays with node offsets."""
    feats, thrs, lefts, rights, vals, roots = [], [], [], [], [], []
    offset = 0
    for feature, thr, left, right, value in trees:
        leaf = feature < 0
        idx = np.arange(feature.size, dtype=np.int64) + offset
        feats.append(np.where(leaf, -1, feature).astype(np.int16))
        thrs.append(np.where(leaf, np.float32(0), thr).astype(np.float32))
        lefts.append(np.where(leaf, idx, left + offset).astype(np.int32))
        rights.append(np.where(leaf, idx, right + offset).astype(np.int32))
        vals.append(np.where(leaf, value, 0.0).astype(np.float32))
        roots.append(offset)
        offset += feature.size
    if offset >= 2**31 or n_features >= 2**15:
        raise ValueError("ensemble too large for int32 node / int16 feature indices")
    feature = np.concatenate(feats)
    left, right = np.concatenate(lefts), np.concatenate(rights)
    roots_a = np.asarray(roots, dtype=np.int32)
    depth = _depths(left, right, roots_a, feature < 0)
    return TreeEnsemble(feature, np.concatenate(thrs), left, right, np.concatenate(vals), roots_a,
                        kind=kind, base=float(base), depth=depth, n_features=n_features)


def from_sklearn_forest(model) -> TreeEnsemble:
    """Flatten a fitted ``RandomForestRegressor`` (single output)."""
    if getattr(model, "n_outputs_", 1) != 1:
        raise ValueError("only single-output forests are supported")
    trees = []
    for est in model.estimators_:
        t = est.tree_
        feature = np.where(t.children_left < 0, -1, t.feature).astype(np.int64)
        thr = _float32_at_most(np.asarray(t.threshold, dtype=np.float64))
        trees.append((feature, thr, t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                      t.value[:, 0, 0].astype(np.float64)))
    return _assemble(trees, "rforest", 0.0, int(model.n_features_in_))


def _xgb_base_score(booster) -> float:
    cfg = json.loads(booster.save_config())
    raw = cfg["learner"]["learner_model_param"]["base_score"]
    raw = raw.strip("[]").split(",")[0] if isinstance(raw, str) else raw
    base = float(raw)
    objective = cfg["learner"]["objective"]["name"]
    if objective not in ("reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror"):
        raise ValueError(f"unsupported xgboost objective {objective!r} (identity link needed)")
    return base


def from_xgboost(model) -> TreeEnsemble:
    """Flatten a fitted ``XGBRegressor`` with an identity-link objective, all trees used."""
    booster = model.get_booster() if hasattr(model, "get_booster") else model
    doc = json.loads(bytes(booster.save_raw("json")))
    gbm = doc["learner"]["gradient_booster"]
    if gbm.get("name") not in ("gbtree", None):
        raise ValueError(f"unsupported booster {gbm.get('name')!r}")
    trees = []
    for tree in gbm["model"]["trees"]:
        left = np.asarray(tree["left_children"], dtype=np.int64)
        right = np.asarray(tree["right_children"], dtype=np.int64)
        cond = np.asarray(tree["split_conditions"], dtype=np.float32)
        leaf = left < 0
        feature = np.where(leaf, -1, np.asarray(tree["split_indices"], dtype=np.int64))
        # xgboost: left iff x < cond (float32)  <=>  x <= nextafter(cond, -inf)
        thr = np.where(leaf, cond, np.nextafter(cond, np.float32(-np.inf))).astype(np.float32)
        value = np.where(leaf, cond, 0.0).astype(np.float64)  # leaves keep their value in split_conditions
        trees.append((feature, thr, left, right, value))
    n_features = int(doc["learner"]["learner_model_param"]["num_feature"])
    return _assemble(trees, "xgboost", _xgb_base_score(booster), n_features)


def constant(value: float, n_features: int, log_target: bool = False) -> TreeEnsemble:
    """One tree of one leaf: ``value`` (its log stored when ``log_target``) whatever the features."""
    leaf = np.float32(np.log(value) if log_target else value)
    zero = np.zeros(1, dtype=np.int32)
    return TreeEnsemble(feature=np.full(1, -1, dtype=np.int16), threshold=np.zeros(1, dtype=np.float32),
                        left=zero, right=zero.copy(), value=np.array([leaf], dtype=np.float32), roots=zero.copy(),
                        kind="rforest", depth=0, n_features=n_features, log_target=log_target)


def from_fitted(model) -> TreeEnsemble:
    """Dispatch on the library of a fitted regressor."""
    name = type(model).__name__
    if name == "RandomForestRegressor":
        return from_sklearn_forest(model)
    if name in ("XGBRegressor", "Booster"):
        return from_xgboost(model)
    raise TypeError(f"cannot flatten a {name}")


def nbytes(ens: TreeEnsemble) -> int:
    return sum(getattr(ens, k).nbytes for k in _ARRAYS)


__all__ = ["TreeEnsemble", "from_fitted", "from_sklearn_forest", "from_xgboost", "nbytes"]
