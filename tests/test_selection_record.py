"""Recorded model selections (calibration/selection_record.py): a cold fit refits the recorded choice only."""

import json
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

from trainsim.calibration import profile as P
from trainsim.calibration.efficiency import Roofline, gpu_of_samples, launch_floor_s, measured_launch_s
from trainsim.calibration.grids import FAST_CANDIDATES
from trainsim.calibration.samples import DataQuirkWarning, load_sample_dir
from trainsim.calibration.select import OperatorRegressor
from trainsim.calibration.selection_record import (
    RECORD_FILE,
    REFERENCE_RECORD,
    main,
    read_selection,
    selection_of,
    signature,
    write_fits,
)
from trainsim.operators.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "calibration" / "profiles"
GRID = (("rforest", {"n_estimators": 5, "max_depth": 6}), ("xgboost", {"n_estimators": 20, "max_depth": 3}))


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 100, size=(n, 3))
    return X, X[:, 0] * X[:, 1] * (1 + 0.05 * rng.standard_normal(n)) + 1.0


def test_a_recorded_selection_refits_the_same_estimator_with_the_recorded_scores():
    X, y = _data()
    searched = OperatorRegressor(candidates=GRID, random_state=3).fit(X, y)
    best = [k for k, _ in GRID].index(searched.best_kind_)
    recorded = OperatorRegressor(candidates=GRID, random_state=3,
                                 selection=(best, searched.candidate_mape_)).fit(X, y)
    assert recorded.best_kind_ == searched.best_kind_ and recorded.candidate_mape_ == searched.candidate_mape_
    assert np.array_equal(recorded.predict(X), searched.predict(X))
    # the other candidate, recorded as the choice, is what gets fitted (the record is obeyed, not re-checked)
    other = OperatorRegressor(candidates=GRID, random_state=3, selection=(1 - best, [1.0, 2.0])).fit(X, y)
    assert other.best_kind_ == GRID[1 - best][0] and other.validation_mape_ == [1.0, 2.0][1 - best]
    with pytest.raises(ValueError, match="does not fit 2 candidates"):
        OperatorRegressor(candidates=GRID, selection=(2, [1.0, 2.0])).fit(X, y)
    with pytest.raises(ValueError, match="does not fit 2 candidates"):
        OperatorRegressor(candidates=GRID, selection=(0, [1.0])).fit(X, y)


SIG = signature("abc", "fast-1", 0, "efficiency", True, "auto-curve3")


def test_a_record_applies_only_to_its_own_fit_and_replaces_only_its_own_entry(tmp_path):
    f = tmp_path / RECORD_FILE
    assert read_selection(f, SIG) is None  # no file
    write_fits(f, [{**SIG, "selection": {"op:gelu:fwd": [1, [3.0, 2.0]]}}])
    assert read_selection(f, SIG) == {"op:gelu:fwd": (1, [3.0, 2.0])}
    for key, other in (("data_hash", "abd"), ("grid", "paper"), ("random_state", 1), ("model", "duration"),
                       ("monotone", False), ("collective_model", "tree")):
        assert read_selection(f, {**SIG, key: other}) is None, key
    dur = {**SIG, "model": "duration"}
    write_fits(f, [{**dur, "selection": {"op:gelu:fwd": [0, [1.0, None]]}}])
    write_fits(f, [{**SIG, "selection": {"op:gelu:bwd": [0, [4.0, 5.0]]}}])  # replaces the first entry only
    assert read_selection(f, SIG) == {"op:gelu:bwd": (0, [4.0, 5.0])}
    assert read_selection(f, dur) == {"op:gelu:fwd": (0, [1.0, None])}
    assert len(json.loads(f.read_text())["fits"]) == 2


@pytest.mark.parametrize("bad, needle", [
    ("{", "unreadable selection record"),
    ('{"format": 0, "fits": []}', "not a selection record of format 1"),
    ('{"format": 1, "fits": [SIG]}'.replace("SIG", json.dumps({**SIG, "selection": {"k": [2, [1.0, 2.0]]}})),
     "selection of 'k' must be"),
    ('{"format": 1, "fits": [SIG]}'.replace("SIG", json.dumps({**SIG, "selection": {"k": [0, [-1.0, 2.0]]}})),
     "selection of 'k' must be"),
])
def test_a_bad_record_is_one_error_naming_its_file(tmp_path, bad, needle):
    f = tmp_path / RECORD_FILE
    f.write_text(bad)
    with pytest.raises(ConfigError, match=needle) as e:
        read_selection(f, SIG)
    assert str(f) in str(e.value)


def test_selection_of_keeps_tree_choices_and_leaves_curves_out():
    summaries = {"op:a:fwd": {"kind": "xgboost", "params": dict(GRID[1][1]), "candidate_mape": [5.0, 4.0]},
                 "coll:all_reduce:1x2": {"kind": "curve", "params": {}, "candidate_mape": []},
                 "op:b:fwd": {"kind": "rforest", "params": {"n_estimators": 99}, "candidate_mape": [1.0, 2.0]}}
    assert selection_of(summaries, GRID) == {"op:a:fwd": (1, [5.0, 4.0])}


# ----------------------------------------------------------------------------- the shipped records


def _subset(keys: list[str], n: int) -> list[str]:
    """``n`` keys spread over the sorted list (deterministic)."""
    keys = sorted(keys)
    return [keys[i * len(keys) // n] for i in range(n)]


@pytest.mark.parametrize("name", ["h100-sxm-bf16", "h200-sxm-bf16"])
def test_the_shipped_record_is_what_the_selection_gives_and_a_recorded_fit_is_the_searched_one(name):
    path = PROFILES / name
    samples = load_sample_dir(path)
    roof = Roofline.for_gpu(gpu_of_samples(P.read_meta(path / P.META_FILE), name),
                            launch_floor_s(samples.compute, measured_launch_s(path)))
    files = [path / f for f in (P.COMPUTE_FILE, P.COLLECTIVE_FILE, P.META_FILE, P.LAUNCH_FILE) if (path / f).exists()]
    sig = signature(P.data_hash(files, path), P._grid_tag("fast"), 0, "efficiency", True, P._collective_tag("auto"))
    record = read_selection(path / RECORD_FILE, sig)
    assert record is not None, (f"{name}: no record of its default fit "
                               "(python -m trainsim.calibration.selection_record)")
    op_keys = [k for k in record if k.startswith("op:")]
    assert len(op_keys) >= 70
    chosen = set(_subset(op_keys, 6))
    rows = [s for s in samples.compute if P._op_key(s.op.kind, s.direction) in chosen]
    fit = dict(candidates=FAST_CANDIDATES, collective_model="auto", monotone=True, model="efficiency", roofline=roof)
    searched = P.fit_profile(name, rows, [], 0, **fit)
    recorded = P.fit_profile(name, rows, [], 0, selections={k: record[k] for k in chosen}, **fit)
    assert set(searched.regressors) == chosen
    versions = json.loads((path / RECORD_FILE).read_text())["fits"][0]["versions"]
    for key in sorted(chosen):
        got = selection_of({key: searched.regressors[key].summary}, FAST_CANDIDATES)[key]
        best, mapes = record[key]
        if versions == P.library_versions():  # the same libraries: the same choice and scores, exactly
            assert got == (best, mapes), key
        else:  # other libraries: the recorded choice is still within 5 % of the best one's score
            assert got[1][best] <= 1.05 * min(got[1]), (key, got, record[key])
        s, r = searched.regressors[key], recorded.regressors[key]
        if got[0] == best:  # the recorded fit is the searched one, bit for bit
            assert pickle.dumps(s.ensemble) == pickle.dumps(r.ensemble) and s.summary == r.summary, key


@pytest.mark.parametrize("name", ["h100-sxm-bf16", "h200-sxm-bf16"])
def test_a_shipped_profile_is_fitted_from_its_record(name):
    # the run's shared cache (tests/conftest.py, fresh each run): fitted here or by an earlier test, by this code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQuirkWarning)
        prof = P.load_profile(name)
    assert prof.manifest["selection"] == f"recorded ({PROFILES / name / RECORD_FILE})"
    # `trainsim profile show` still has every candidate's validation MAPE (the recorded ones)
    trees = [r.summary for r in prof.regressors.values() if r.summary["kind"] not in ("curve", P.CONSTANT_KIND)]
    assert len(trees) >= 70 and all(len(s["candidate_mape"]) == len(FAST_CANDIDATES) for s in trees)
    assert all(s["validation_mape"] == s["candidate_mape"][[k for k, _ in FAST_CANDIDATES].index(s["kind"])]
               for s in trees if s["validation_mape"] is not None)


def test_the_reference_record_holds_both_reference_profiles():
    fits = json.loads(REFERENCE_RECORD.read_text())["fits"]
    assert {(f["grid"], f["model"]) for f in fits} == {("paper", "duration"), ("paper", "efficiency")}
    assert len(fits) == 4 and all(len(f["selection"]) >= 40 for f in fits)


def test_the_command_names_a_bad_profile_in_one_line(capsys):
    assert main(["no-such-profile", "--models", "efficiency"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-profile" in err[0]
