"""Monotone constraints: more work is never priced as less time (calibration/select.py).

The sign rule, the constrained learners on synthetic data, the scope (sample directories
constrained, reference profiles not) and, on the shipped h100-sxm-bf16 profile, durations that
never fall as b, l, d (or the layers of an update kind) grow, inside and outside the sampled range.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainsim.calibration.profile as profile_mod
from trainsim.calibration.profile import ExtrapolationWarning, FittedProfile, fit_profile, load_profile
from trainsim.calibration.samples import ComputeSample
from trainsim.calibration.select import OperatorRegressor, make_model, monotone_constraints, monotone_sign
from trainsim.operators.ops import FEATURE_NAMES, Direction, Op, OpKind

HF_KINDS = [k for k in OpKind if k.value.startswith("hf_")]
MEGATRON_KINDS = [k for k in OpKind if not k.value.startswith("hf_")]
TINY_RF = [("rforest", {"n_estimators": 8, "max_depth": 8, "min_samples_leaf": 2})]
TINY_XGB = [("xgboost", {"n_estimators": 30, "max_depth": 3, "learning_rate": 0.3})]


# ----------------------------------------------------------------------------- the sign rule


@pytest.mark.parametrize("name", ["b", "l", "d", "b*l", "v/mp", "3d/mp", "4d/mp", "h/mp", "f/mp", "d/mp", "b*h/mp",
                                  "b*l*d", "b*l*d*3d/mp", "b*l*l*d/mp", "b*l*d*v/mp", "b*l*v/mp", "d*f/mp",
                                  "params", "encoders", "entries"])
def test_amounts_of_work_and_sizes_are_plus_one(name):
    assert monotone_sign(name) == 1


def test_mp_alone_is_minus_one_and_the_head_dimension_is_free():
    assert monotone_sign("mp") == -1  # optimizer kinds: more ranks, fewer parameters per rank
    assert monotone_sign("d/h") == 0  # head dimension at fixed work: a tiling, not an amount


@pytest.mark.parametrize("name", ["h/d", "l/b", "mp/d", "d/h/mp", "x", "", "b*", "d/mp/mp", "b**l", "1/mp"])
def test_unknown_names_are_refused(name):
    with pytest.raises(ValueError, match="monotone_sign"):
        monotone_sign(name)


def test_every_feature_name_has_a_direction():
    for kind, names in FEATURE_NAMES.items():
        cst = monotone_constraints(names)
        assert len(cst) == len(names) and set(cst) <= {-1, 0, 1}, kind
        assert all(c >= 0 for c, n in zip(cst, names, strict=True) if n != "mp"), kind
    assert monotone_constraints(FEATURE_NAMES[OpKind.OPTIMIZER_FIRST]) == (-1, 1, 1)
    assert monotone_constraints(FEATURE_NAMES[OpKind.HF_ATTENTION]) == (1, 1, 1, 0, 1)
    assert monotone_constraints(profile_mod.COLLECTIVE_FEATURES) == (1,)


# ----------------------------------------------------------------------------- the learners


def _noisy_work(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Durations ~ x0 * x1 with 30 % multiplicative noise: non-monotone samples, as measured ones are."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(1, 17, n), rng.integers(1, 9, n) * 256, rng.choice([64.0, 128.0], n)])
    y = 5 + X[:, 0] * X[:, 1] / 50 * rng.lognormal(0, 0.3, n)
    return X.astype(float), y


@pytest.mark.parametrize("cands", [TINY_RF, TINY_XGB], ids=["rforest", "xgboost"])
def test_constrained_learners_are_monotone_positive_and_flatten_exactly(cands):
    X, y = _noisy_work()
    r = OperatorRegressor(candidates=cands, monotonic_cst=(1, 1, 0), log_target=True).fit(X, y)
    g0, g1 = np.meshgrid(np.arange(0, 20), np.arange(0, 10) * 256, indexing="ij")
    for hd in (64.0, 128.0):
        Xg = np.column_stack([g0.ravel(), g1.ravel(), np.full(g0.size, hd)])
        t = r.predict(Xg).reshape(g0.shape)
        assert (t > 0).all()
        assert (np.diff(t, axis=0) >= 0).all() and (np.diff(t, axis=1) >= 0).all()
        ens = r.to_ensemble()  # the numpy evaluator applies the same exp
        assert ens.log_target
        np.testing.assert_allclose(ens.predict(Xg), r.predict(Xg), rtol=2e-6)


def test_monotonic_cst_is_checked_and_an_empty_constraint_passes_nothing():
    X, y = _noisy_work(40)
    with pytest.raises(ValueError, match="monotonic_cst"):
        OperatorRegressor(candidates=TINY_RF, monotonic_cst=(1, 1)).fit(X, y)
    with pytest.raises(ValueError, match="monotonic_cst"):
        OperatorRegressor(candidates=TINY_RF, monotonic_cst=(1, 2, 0)).fit(X, y)
    # unconstrained models are built exactly as before constraints existed (reference profiles)
    for cst in (None, (0, 0, 0)):
        assert make_model("rforest", {}, 0, 1, cst).get_params()["monotonic_cst"] is None
        assert make_model("xgboost", {}, 0, 1, cst).get_params()["monotone_constraints"] is None
    assert make_model("xgboost", {}, 0, 1, (1, -1, 0)).get_params()["monotone_constraints"] == (1, -1, 0)


# ----------------------------------------------------------------------------- scope and cache


def _rows() -> list[ComputeSample]:
    X, y = _noisy_work(80)
    return [ComputeSample(Op(OpKind.HF_RESIDUAL, b=int(b), l=int(l), d=1024), Direction.FWD, float(t))
            for (b, l, _), t in zip(X, y, strict=True)]


def test_fit_profile_is_unconstrained_unless_asked():
    plain = fit_profile("t", _rows(), [], candidates=TINY_XGB, n_jobs=1)
    mono = fit_profile("t", _rows(), [], candidates=TINY_XGB, n_jobs=1, monotone=True)
    assert plain.manifest["monotone"] is False and mono.manifest["monotone"] is True
    assert not plain.regressors["op:hf_residual:fwd"].ensemble.log_target
    assert mono.regressors["op:hf_residual:fwd"].ensemble.log_target


def test_cache_written_before_the_flag_refits_a_sample_dir_but_not_a_reference(tmp_path):
    prof = fit_profile("t", _rows(), [], candidates=TINY_XGB, n_jobs=1, manifest={"data_hash": "h"})
    path = prof.save(tmp_path / "p")
    manifest = json.loads((path / profile_mod.MANIFEST_FILE).read_text())
    del manifest["monotone"]  # as written by the previous release
    (path / profile_mod.MANIFEST_FILE).write_text(json.dumps(manifest))
    assert profile_mod._cache_valid(path, "h", 0, "tree", monotone=False)
    assert not profile_mod._cache_valid(path, "h", 0, "tree", monotone=True)
    back = FittedProfile.load(path)  # an ensemble without the log_target key loads as linear
    assert not back.regressors["op:hf_residual:fwd"].ensemble.log_target


# ----------------------------------------------------------------------------- the shipped profile


@pytest.fixture(scope="module")
def bf16() -> FittedProfile:
    """Fitted once per session through the shared cache (conftest's TRAINSIM_CACHE). The duration
    model: its trees are monotone by construction; the efficiency model (the default) is piecewise
    constant in the slowdown, which tests/test_invariants.py measures instead (docs/efficiency.md)."""
    prof = load_profile("h100-sxm-bf16", model="duration")
    assert prof.manifest["monotone"] is True
    return prof


B = [1, 2, 3, 4, 6, 8, 16, 64]  # sampled 1..16
L = [64, 256, 1024, 2048, 3072, 5120, 16384]  # sampled 256..5120
D = [256, 512, 1024, 1536, 3072, 4096, 8192, 12288]  # sampled 512..8192
LAYERS = [1, 2, 4, 8, 12, 24]  # sampled 1..12


def _seconds(prof: FittedProfile, ops: list[Op], direction: Direction) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # outside the range on purpose
        return prof.op_seconds(ops, direction)


def _directions(kind: OpKind) -> Iterator[Direction]:
    yield from ((Direction.UPDATE,) if kind.is_optimizer else (Direction.FWD, Direction.BWD))


def _shape_grid(kind: OpKind) -> tuple[dict[str, list[int]], dict]:
    if kind.is_optimizer:
        return {"d": D, "layers": LAYERS}, {"v": 50432}
    return {"b": B, "l": L, "d": D}, {"v": 50432}


@pytest.mark.parametrize("kind", HF_KINDS + MEGATRON_KINDS, ids=lambda k: k.value)
def test_shipped_profile_never_prices_more_work_faster(bf16, kind):
    axes, fixed = _shape_grid(kind)
    names = list(axes)
    for direction in _directions(kind):
        for head_dim in (64, 128):  # d grows at a fixed head dimension, as models scale
            for mp in (1, 2):
                grid = np.array(np.meshgrid(*axes.values(), indexing="ij")).reshape(len(names), -1).T
                ops = [Op(kind, **dict(zip(names, map(int, g), strict=True)), h=max(int(g[names.index("d")])
                          // head_dim, mp), mp=mp, **fixed) for g in grid]
                t = _seconds(bf16, ops, direction).reshape([len(v) for v in axes.values()])
                assert (t > 0).all()
                for ax, name in enumerate(names):
                    drop = np.diff(t, axis=ax)
                    assert (drop >= 0).all(), (f"{kind.value} {direction.value} falls as {name} grows "
                                                f"(head_dim {head_dim}, mp {mp}): {drop.min() * 1e6:.2f} us")


def test_update_kinds_do_not_slow_down_with_more_ranks(bf16):
    for kind in (OpKind.OPTIMIZER_FIRST, OpKind.OPTIMIZER_MIDDLE, OpKind.OPTIMIZER_LAST, OpKind.HF_OPTIMIZER,
                 OpKind.HF_GRAD_ACCUM):
        t = _seconds(bf16, [Op(kind, d=4096, h=32, layers=8, v=50432, mp=mp) for mp in (1, 2, 4, 8)],
                     Direction.UPDATE)
        assert (np.diff(t) <= 0).all(), kind.value


def test_the_measured_regression_is_gone(bf16):
    # the unconstrained profile priced these 0.107 ms at b=4 > 0.090 ms at b=8 (hf_dense forward),
    # 0.260 > 0.244 > 0.227 ms at b = 2, 4, 8 (its backward) and 0.110 > 0.100 ms (hf_residual backward)
    for kind in (OpKind.HF_DENSE, OpKind.HF_RESIDUAL):
        for direction in (Direction.FWD, Direction.BWD):
            t = _seconds(bf16, [Op(kind, b=b, l=2048, d=1024, h=16, v=50432) for b in (1, 2, 4, 8, 16)], direction)
            assert (np.diff(t) >= 0).all(), (kind.value, direction.value, t)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(HF_KINDS + MEGATRON_KINDS), b=st.integers(1, 48), l=st.integers(32, 12000),
       heads_per_rank=st.integers(1, 96), head_dim=st.sampled_from([64, 128]), mp=st.sampled_from([1, 2, 4]),
       layers=st.integers(1, 30), axis=st.sampled_from(["b", "l", "d", "layers"]), grow=st.integers(1, 4096))
def test_growing_any_size_never_speeds_an_operator_up(bf16, kind, b, l, heads_per_rank, head_dim, mp, layers, axis,
                                                      grow):
    # d grows by whole heads at a fixed head dimension (d/h is unconstrained: see monotone_sign)
    h = heads_per_rank * mp
    small = {"b": b, "l": l, "h": h, "layers": layers}
    large = dict(small)
    large[{"d": "h"}.get(axis, axis)] += grow if axis != "d" else mp * (1 + grow % 32)
    ops = [Op(kind, **s, d=s["h"] * head_dim, mp=mp, v=50432) for s in (small, large)]
    for direction in _directions(kind):
        t_small, t_large = _seconds(bf16, ops, direction)
        assert t_large >= t_small, (kind.value, direction.value, ops, t_small, t_large)
