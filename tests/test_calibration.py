"""Tests of calibration/: sample tables, reference loader, selection, numpy forests, profiles."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import trainsim.calibration.profile as profile_mod
from trainsim.calibration.forest import TreeEnsemble, from_fitted
from trainsim.calibration.profile import ExtrapolationWarning, FittedProfile, fit_profile, load_profile
from trainsim.calibration.reference import load_reference, resolve_reference_dir
from trainsim.calibration.roofline import RooflineProfile
from trainsim.calibration.samples import (
    CollectiveSample,
    ComputeSample,
    DataQuirkWarning,
    SampleWriter,
    read_collectives,
    read_compute,
    write_samples,
)
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind, features
from trainsim.operators.partition import padded_vocab

REPO = Path(__file__).resolve().parents[1]
REF = Path(os.environ.get("TRAINSIM_REFERENCE_DATA") or REPO.parent / "shared" / "reference-data"
           / "estimate-train-time")
needs_ref = pytest.mark.skipif(not (REF / "Perlmutter" / "operator").is_dir(), reason="reference data not available")

TINY = [("rforest", {"n_estimators": 5, "max_depth": 8, "min_samples_leaf": 2}),
        ("xgboost", {"n_estimators": 20, "max_depth": 3, "learning_rate": 0.3})]


def synthetic(n: int = 40, seed: int = 0) -> tuple[list[ComputeSample], list[CollectiveSample]]:
    """linear1 fwd/bwd and a 1x2 all-reduce, durations roughly proportional to work."""
    rng = np.random.default_rng(seed)
    comp, coll = [], []
    for _ in range(n):
        op = Op(OpKind.LINEAR1, b=int(rng.choice([2, 4])), l=int(rng.choice([1024, 2048])),
                d=int(rng.choice([2048, 3072, 4096])), mp=int(rng.choice([1, 2])))
        t = 2 * op.b * op.l * op.d * 3 * op.d / op.mp / 2e8
        comp += [ComputeSample(op, Direction.FWD, t), ComputeSample(op, Direction.BWD, 2.1 * t)]
        e = int(rng.integers(10**6, 10**8))
        coll.append(CollectiveSample(Collective(CollKind.ALL_REDUCE, e, 1, 2), 5 + e / 2e4))
    return comp, coll


# ----------------------------------------------------------------------------- sample tables


def test_schema_roundtrip_and_bad_rows_name_file_and_line(tmp_path):
    comp, coll = synthetic(3)
    write_samples(tmp_path, (comp, coll), meta={"gpu": "test"})
    assert read_compute(tmp_path / "compute.csv") == comp
    assert read_collectives(tmp_path / "collectives.csv") == coll
    assert json.loads((tmp_path / "meta.json").read_text()) == {"gpu": "test"}

    bad = tmp_path / "bad.csv"
    bad.write_text("op,direction,b,l,d,h,mp,v,f,layers,duration_us\n"
                   "linear1,fwd,2,1024,2048,1,1,1,0,0,12.5\n"
                   "linear1,fwd,2,1024,x,1,1,1,0,0,12.5\n")
    with pytest.raises(ConfigError) as e:
        read_compute(bad)
    assert e.value.field == f"{bad}:3" and "'d'" in e.value.message
    bad.write_text("op,direction,b,l,d,h,mp,v,f,layers,duration_us\noptimizer_first,fwd,1,1,2048,1,1,1,0,4,9\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:2.*cannot have direction fwd"):
        read_compute(bad)
    bad.write_text("op,direction,b,l,d,h,mp,v,f,layers,duration_us\nlinear1,bwd,2,1024,2048,1,1,1,0,0,-3\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:2.*duration_us"):
        read_compute(bad)
    bad.write_text("collective,entries,nodes\nall_reduce,10,1\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:1.*header"):
        read_collectives(bad)


def test_writer_appends_and_resumes(tmp_path):
    comp, coll = synthetic(3)
    w = SampleWriter(tmp_path, meta={"gpu": "x"}, iteration_column=True)
    w.append_compute(ComputeSample(comp[0].op, comp[0].direction, comp[0].duration_us, iteration=0))
    w.append_collective(coll[0])
    # A new writer (a resumed harness) keeps the existing layout and appends after the rows.
    w2 = SampleWriter(tmp_path)
    assert [s.op for s in w2.done_compute()] == [comp[0].op]
    w2.append_compute(comp[1])
    rows = read_compute(tmp_path / "compute.csv")
    assert [r.iteration for r in rows] == [0, None]
    assert (tmp_path / "compute.csv").read_text().count("op,direction") == 1
    # A crash mid-row: the fragment is dropped with a warning, the next row is intact.
    with (tmp_path / "compute.csv").open("a") as fh:
        fh.write("linear1,fwd,2,10")
    with pytest.warns(DataQuirkWarning, match="incomplete last row"):
        SampleWriter(tmp_path).append_compute(comp[2])
    assert [r.op for r in read_compute(tmp_path / "compute.csv")] == [comp[0].op, comp[1].op, comp[2].op]
    with pytest.raises(ConfigError, match="cannot have direction"):
        w2.append_compute(ComputeSample(Op(OpKind.OPTIMIZER_LAST, d=8, layers=2), Direction.FWD, 1.0))


# ----------------------------------------------------------------------------- reference loader


def test_reference_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINSIM_REFERENCE_DATA", raising=False)
    with pytest.raises(ConfigError, match="TRAINSIM_REFERENCE_DATA") as e:
        resolve_reference_dir(None)
    assert e.value.field == "--reference-data"
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=str(missing)):
        resolve_reference_dir(str(missing))
    monkeypatch.setenv("TRAINSIM_REFERENCE_DATA", str(missing))
    with pytest.raises(ConfigError, match=str(missing)):
        load_profile("reference:Perlmutter", cache_dir=str(tmp_path))
    (tmp_path / "src" / "estimate_train_time" / "data" / "regressors" / "Vista" / "operator").mkdir(parents=True)
    assert resolve_reference_dir(str(tmp_path)) == tmp_path / "src" / "estimate_train_time" / "data" / "regressors"


@needs_ref
def test_reference_rows_map_to_our_ops():
    comp, coll = load_reference(REF, "Perlmutter")
    first = {}
    for s in comp:
        first.setdefault((s.op.kind, s.direction), s)
    # linear1 row 1: mp=1,b=2,l=1024,dim=5632 -> [b*l, d, 3d/mp]; F 1728.8, B 3552.4
    s = first[(OpKind.LINEAR1, Direction.FWD)]
    assert s.op == Op(OpKind.LINEAR1, b=2, l=1024, d=5632, h=1, mp=1, v=50304) and s.duration_us == 1728.8
    assert features(s.op) == (2048, 5632, 16896)
    assert first[(OpKind.LINEAR1, Direction.BWD)].duration_us == 3552.4
    # RoPE row 1: mp=1,b=4,h=16,l=1024,dim=5632 -> [b, l, h/mp, d/h]
    assert features(first[(OpKind.ROPE, Direction.FWD)].op) == (4, 1024, 16, 352)
    # Fused softmax row 1: mp=1,b=2,h=2,l=1024 -> [b*h/mp, l, l]; F 16.0
    s = first[(OpKind.FUSED_SOFTMAX, Direction.FWD)]
    assert features(s.op) == (4, 1024, 1024) and s.duration_us == 16.0
    # Embedding at mp=2: v/mp = ceil(50257/256)*256/2 = 25216
    emb = next(s for s in comp if s.op.kind is OpKind.EMBEDDING and s.op.mp == 2)
    assert emb.op.v == padded_vocab(50257, 2) == 50432 and features(emb.op)[1] == 25216
    # first-stage optimizer row 1: mp=1, dim=2048, encoders=11, 17808.6 us
    s = first[(OpKind.OPTIMIZER_FIRST, Direction.UPDATE)]
    assert features(s.op) == (1, 2048, 11) and s.duration_us == 17808.6
    assert (OpKind.OPTIMIZER_FIRST, Direction.FWD) not in first
    # allreduce + allreduce_large merge per (nodes, gpn); the union files are skipped.
    ar12 = [c for c in coll if (c.coll.kind, c.coll.nodes, c.coll.gpus_per_node) == (CollKind.ALL_REDUCE, 1, 2)]
    assert len(ar12) == 1729 + 1777
    assert ar12[0].coll.entries == 20971520 and ar12[0].duration_us == 679.4
    assert {(c.coll.nodes, c.coll.gpus_per_node) for c in coll if c.coll.kind is CollKind.P2P} == {(1, 2), (2, 1)}


# ----------------------------------------------------------------------------- selection and forests


def _xy(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 100, size=(n, 3))
    return X, 10 + X[:, 0] * X[:, 1] + 3 * X[:, 2]


def test_operator_regressor_contract_and_reproducibility():
    from sklearn.base import clone

    from trainsim.calibration.select import OperatorRegressor

    X, y = _xy()
    r = OperatorRegressor(candidates=TINY, random_state=3)
    assert clone(r).get_params() == r.get_params()
    r.fit(X, y)
    for attr in ("best_kind_", "best_params_", "validation_mape_", "feature_min_", "feature_max_", "estimator_"):
        assert hasattr(r, attr)
    assert r.best_kind_ in ("rforest", "xgboost") and 0 <= r.validation_mape_ < 50
    assert r.validation_mape_ == min(r.candidate_mape_)
    np.testing.assert_array_equal(r.feature_min_, X.min(axis=0))
    Xt, _ = _xy(50, seed=9)
    same = OperatorRegressor(candidates=TINY, random_state=3).fit(X, y)
    np.testing.assert_array_equal(r.predict(Xt), same.predict(Xt))
    with pytest.raises(ValueError, match="positive"):
        OperatorRegressor(candidates=TINY).fit(X, y - 1e6)


@pytest.mark.parametrize("kind", ["rforest", "xgboost"])
def test_numpy_forest_matches_library(kind, tmp_path):
    from trainsim.calibration.select import make_model

    X, y = _xy(400)
    params = {"n_estimators": 25, "min_samples_leaf": 2} if kind == "rforest" else \
        {"n_estimators": 60, "max_depth": 5, "learning_rate": 0.2, "subsample": 0.8}
    model = make_model(kind, params, random_state=0).fit(X, y)
    ens = from_fitted(model)
    rng = np.random.default_rng(1)
    # training points hit thresholds' neighbourhoods exactly; uniform points go out of range too
    Xt = np.vstack([X[:100], rng.uniform(-50, 150, size=(200, 3)), np.round(X[:50])])
    ref = model.predict(Xt)
    np.testing.assert_allclose(ens.predict(Xt), ref, rtol=1e-6)
    ens.save(tmp_path / "e.npz")
    np.testing.assert_array_equal(TreeEnsemble.load(tmp_path / "e.npz").predict(Xt), ens.predict(Xt))
    with pytest.raises(ValueError, match="non-finite"):
        ens.predict(np.array([[1.0, np.nan, 2.0]]))


def test_forest_module_does_not_import_fitting_libraries():
    code = "import sys, calibration, calibration.forest, calibration.profile; " \
           "print([m for m in sys.modules if m.split('.')[0] in ('sklearn', 'xgboost')])"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- profiles


@pytest.fixture(scope="module")
def tiny_profile():
    comp, coll = synthetic(60)
    return fit_profile("tiny", comp, coll, random_state=0, candidates=TINY, n_jobs=1)


def test_profile_predicts_seconds_and_collective_fallbacks(tiny_profile):
    op = Op(OpKind.LINEAR1, b=2, l=1024, d=2048, mp=1)
    s = tiny_profile.op_seconds([op, op], Direction.FWD)
    expect_us = 2 * 2 * 1024 * 2048 * 3 * 2048 / 2e8
    assert s.shape == (2,) and s[0] == s[1] and 0.5 * expect_us * 1e-6 < s[0] < 2 * expect_us * 1e-6
    c = tiny_profile.collective_seconds([
        Collective(CollKind.ALL_REDUCE, 5 * 10**7, 1, 2),
        Collective(CollKind.ALL_REDUCE, 5 * 10**7, 2, 4),  # never sampled -> NaN (caller's closed form)
        Collective(CollKind.ALL_GATHER, 5 * 10**7, 1, 1),  # one rank -> free
    ])
    assert 0 < c[0] < 1 and math.isnan(c[1]) and c[2] == 0.0
    assert tiny_profile.op_seconds([], Direction.BWD).shape == (0,)


def test_missing_operator_is_a_config_error(tiny_profile):
    with pytest.raises(ConfigError, match=r"profile 'tiny' has no samples for operator rope \(bwd\)") as e:
        tiny_profile.op_seconds([Op(OpKind.ROPE, b=2, l=1024, d=2048, h=16)], Direction.BWD)
    assert e.value.field == "profile"


def test_extrapolation_warns_once_per_operator_feature():
    comp, coll = synthetic(60)
    prof = fit_profile("tiny", comp, coll, candidates=TINY, n_jobs=1)
    far = Op(OpKind.LINEAR1, b=2, l=1024, d=8192, mp=1)  # d = 8192 > 4096 sampled
    with pytest.warns(ExtrapolationWarning) as rec:
        prof.op_seconds([far, far], Direction.FWD)
        prof.op_seconds([far], Direction.FWD)
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 2  # features d and 3d/mp, once each
    assert all("linear1 (fwd)" in m for m in msgs)
    assert any("feature d = 8192" in m and "[2048, 4096]" in m for m in msgs)
    with pytest.warns(ExtrapolationWarning, match="entries"):
        prof.collective_seconds([Collective(CollKind.ALL_REDUCE, 10**10, 1, 2)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof.op_seconds([Op(OpKind.LINEAR1, b=2, l=1024, d=2048, mp=1)], Direction.BWD)


def test_profile_save_load_roundtrip(tiny_profile, tmp_path):
    tiny_profile.save(tmp_path / "p")
    back = FittedProfile.load(tmp_path / "p")
    assert back.name == "tiny" and back.selection_report() == tiny_profile.selection_report()
    ops = [Op(OpKind.LINEAR1, b=b, l=2048, d=d, mp=mp) for b in (2, 4) for d in (2048, 4096) for mp in (1, 2)]
    for direction in (Direction.FWD, Direction.BWD):
        np.testing.assert_array_equal(back.op_seconds(ops, direction), tiny_profile.op_seconds(ops, direction))
    cs = [Collective(CollKind.ALL_REDUCE, e, 1, 2) for e in (5 * 10**6, 3 * 10**7, 9 * 10**7)]
    np.testing.assert_array_equal(back.collective_seconds(cs), tiny_profile.collective_seconds(cs))
    rows = back.selection_report()
    assert {(r["operator"], r["direction"]) for r in rows} == {("linear1", "fwd"), ("linear1", "bwd"),
                                                               ("all_reduce", "1x2")}
    assert all(r["n"] == 60 and r["model"] in ("rforest", "xgboost") for r in rows)


def test_sample_dir_profile_is_cached(tmp_path, monkeypatch):
    comp, coll = synthetic(30)
    samples = write_samples(tmp_path / "s", (comp, coll), meta={"gpu": "toy"})
    cache = tmp_path / "cache"
    before = profile_mod.fit_calls
    p1 = load_profile(str(samples), cache_dir=str(cache))
    assert profile_mod.fit_calls == before + 1
    (entry,) = list(cache.iterdir())
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["data_hash"].startswith(entry.name.rsplit("-", 1)[1])
    assert set(manifest["versions"]) == {"numpy", "scikit-learn", "xgboost"}
    mtime = (entry / "manifest.json").stat().st_mtime_ns
    p2 = load_profile(str(samples), cache_dir=str(cache))
    assert profile_mod.fit_calls == before + 1 and (entry / "manifest.json").stat().st_mtime_ns == mtime
    op = [Op(OpKind.LINEAR1, b=4, l=2048, d=3072, mp=2)]
    np.testing.assert_array_equal(p1.op_seconds(op, Direction.BWD), p2.op_seconds(op, Direction.BWD))
    # changed library versions invalidate the cache
    monkeypatch.setattr(profile_mod, "library_versions", lambda: {"numpy": "0", "scikit-learn": "0", "xgboost": "0"})
    load_profile(str(samples), cache_dir=str(cache))
    assert profile_mod.fit_calls == before + 2


def test_unknown_profile_and_roofline(tmp_path):
    with pytest.raises(ConfigError, match="unknown profile 'nonsense'; known: reference:Perlmutter"):
        load_profile("nonsense", cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown GPU 'z'"):
        load_profile("roofline:z", gpu_specs={"a100": (312e12, 2.0e12)})
    rf = load_profile("roofline:a100", gpu_specs={"a100": (312e12, 2.0e12)})
    assert isinstance(rf, RooflineProfile)
    op = Op(OpKind.LINEAR1, b=4, l=2048, d=6144, mp=4)
    # 2*8192*6144*4608 FLOPs at 312 TFLOP/s (compute-bound) times the learned slowdown of linear1
    from trainsim.calibration.efficiency import load_roofline_table

    table = load_roofline_table()
    expect = 2 * 8192 * 6144 * 4608 / 312e12 * table["slowdowns"]["linear1:fwd"]
    assert rf.op_seconds([op], Direction.FWD)[0] == pytest.approx(expect)
    opt = Op(OpKind.OPTIMIZER_MIDDLE, d=1024, mp=1, layers=2)
    params = 2 * (4 * 1024 + 8 * 1024 * 1025 + 1024 * 4097)
    assert rf.op_seconds([opt], Direction.UPDATE)[0] == pytest.approx(
        max(table["launch_s"], 32 * params / 2e12 * table["slowdowns"]["optimizer_middle:update"]))
    c = rf.collective_seconds([Collective(CollKind.P2P, 100, 2, 1), Collective(CollKind.P2P, 100, 1, 1)])
    assert math.isnan(c[0]) and c[1] == 0.0


# ----------------------------------------------------------------------------- the real reference profile


@pytest.fixture(scope="session")
def perlmutter():
    # the run's shared cache (tests/conftest.py): whichever test loads this profile first pays its fit,
    # and the caching is checked below by a second load that must not fit again
    cache = profile_mod.cache_root()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQuirkWarning)
        prof = load_profile("reference:Perlmutter", reference_dir=str(REF), cache_dir=str(cache))
    return prof, cache


@needs_ref
def test_reference_profile_fits_caches_and_flags_out_of_range(perlmutter):
    prof, cache = perlmutter
    calls = profile_mod.fit_calls
    again = load_profile("reference:Perlmutter", reference_dir=str(REF), cache_dir=str(cache))
    assert profile_mod.fit_calls == calls
    mapes = [r["validation_mape_pct"] for r in prof.selection_report() if r["operator"] not in ("all_gather",)]
    assert np.median(mapes) < 10
    # GPT-20B at mp=4: Perlmutter's linear2 was sampled at mp=1 only, so d/mp = 1536 < 2048.
    op = Op(OpKind.LINEAR2, b=4, l=2048, d=6144, h=64, mp=4, v=padded_vocab(50257, 4))
    with pytest.warns(ExtrapolationWarning, match=r"linear2 \(fwd\) feature d/mp = 1536"):
        t = again.op_seconds([op], Direction.FWD)
    assert 0 < t[0] < 0.1
    # a cached profile predicts without the fitting libraries
    code = ("import sys, warnings; warnings.simplefilter('ignore'); from calibration import load_profile; "
            "from operators import Op, OpKind, Direction; "
            f"p = load_profile('reference:Perlmutter', reference_dir={str(REF)!r}, cache_dir={str(cache)!r}); "
            "print(p.op_seconds([Op(OpKind.GELU, b=4, l=2048, d=6144, mp=4)], Direction.BWD)[0] > 0, "
            "[m for m in sys.modules if m.split('.')[0] in ('sklearn', 'xgboost')])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True []"


def test_library_versions_match_package_metadata():
    """The cache key's versions come from dist-info folder names; they must be what metadata says."""
    from importlib import metadata

    from trainsim.calibration.profile import _dist_info_version, library_versions

    expected = {}
    for pkg in ("numpy", "scikit-learn", "xgboost"):
        try:
            expected[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            expected[pkg] = None
    assert library_versions() == expected
    assert _dist_info_version("no-such-package-trainsim") is None
