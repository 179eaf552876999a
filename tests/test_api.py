"""The Python API (``import trainsim``): the same numbers as the CLI, frozen results, one error type."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainsim
from trainsim.scenarios.cli import main
from trainsim.sim.engine import simulate as engine_simulate

ROOT = Path(__file__).resolve().parents[1]
FAST = {"profile.name": "roofline", "training.micro_batches": 4}  # no fitting: seconds, not minutes


@pytest.fixture(scope="module")
def small():
    return trainsim.load_scenario("gpt20b-dgxh100", overrides=FAST)


def test_overrides_as_mapping_or_strings_give_the_same_scenario():
    a = trainsim.load_scenario("gpt20b-dgxh100", overrides={"training.micro_batches": 6, "parallelism.dp": 2})
    b = trainsim.load_scenario("gpt20b-dgxh100", overrides=["training.micro_batches=6", "parallelism.dp=2"])
    assert a == b
    assert a.training.micro_batches == 6 and a.parallelism.dp == 2
    assert trainsim.load_scenario(ROOT / "scenarios" / "bundled" / "gpt20b-dgxh100.yaml").name == "gpt20b-dgxh100"


@pytest.mark.parametrize("overrides, field", [
    ({"nosuch.key": 1}, "overrides"),
    ({"training": 1}, "overrides"),
    ({"training.micro_batches": "many"}, "training.micro_batches"),
    ("training.micro_batches=4", "overrides"),
])
def test_bad_overrides_raise_config_error_naming_the_field(overrides, field):
    with pytest.raises(trainsim.ConfigError) as e:
        trainsim.load_scenario("gpt20b-dgxh100", overrides=overrides)
    assert e.value.field == field


def test_predict_matches_the_cli(small, capsys, tmp_path):
    pred = trainsim.predict(small)
    assert pred.iteration_s == pred.eq7.iteration_s > 0
    path = tmp_path / "s.yaml"
    path.write_text((ROOT / "scenarios" / "bundled" / "gpt20b-dgxh100.yaml").read_text())
    assert main(["predict", str(path), "--json", *[f"--set={k}={v}" for k, v in FAST.items()]]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["iteration_s"] == pred.to_dict()["iteration_s"]
    assert cli["components"] == pred.to_dict()["components"]


def test_simulate_matches_the_cli_and_results_are_frozen(small, capsys):
    sim = trainsim.simulate(small)
    assert main(["run", "gpt20b-dgxh100", "--json", *[f"--set={k}={v}" for k, v in FAST.items()]]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["iteration_s"] == sim.iteration_s
    assert json.loads(json.dumps(sim.to_dict())) == {**sim.to_dict(), "sim_wall_s": sim.to_dict()["sim_wall_s"]}
    with pytest.raises(dataclasses.FrozenInstanceError):
        sim.trace = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainsim.predict(small).profile_name = "x"  # type: ignore[misc]


def test_simulate_keeps_the_scenarios_overlap_and_jitter(small):
    """The engine called bare would drop them; the API must not."""
    small = trainsim.load_scenario("gpt20b-dgxh100", overrides={**FAST, "training.dp_bucket": 20_000_000})
    pred = trainsim.predict(small)
    overlap = dataclasses.replace(small, simulation=dataclasses.replace(small.simulation, overlap_dp=True))
    with_overlap = trainsim.simulate(overlap).iteration_s
    bare = engine_simulate(pred.costs, small.cluster).iteration_s
    assert with_overlap == engine_simulate(pred.costs, small.cluster, overlap_dp=True).iteration_s
    assert with_overlap < bare  # overlapping gradient buckets with the last backward hides some of them
    jittered = trainsim.load_scenario("gpt20b-dgxh100", overrides={**FAST, "simulation.jitter": {"preset": "vista"}})
    assert trainsim.simulate(jittered).iteration_s != trainsim.simulate(small).iteration_s


def test_monte_carlo_is_seeded_and_reports_progress(small):
    jittered = dataclasses.replace(small, simulation=dataclasses.replace(small.simulation, jitter={"preset": "vista"}))
    done: list[int] = []
    a = trainsim.monte_carlo(jittered, n=6, seed=3, shares=0, progress=done.append)
    b = trainsim.monte_carlo(jittered, n=6, seed=3, shares=0)
    assert sum(done) == 6
    assert a.samples_s.tolist() == b.samples_s.tolist()
    assert a.min_s <= a.mean_s <= a.max_s
    d = a.to_dict()
    assert d["scenario"] == small.name and d["jitter_configured"] is True
    json.dumps(d, allow_nan=False)


def test_sweep_ranks_layouts_and_explains_skips(small):
    res = trainsim.sweep(small, pp=[1, 2, 4, 32], mp=[1, 4, 8])
    names = [r.layout for r in res.rows]
    assert names and all(r.fits_memory for r in res.rows[:1])
    assert res.best is res.rows[0]
    ranked = [r.simulated_s for r in res.rows if r.fits_memory]
    assert ranked == sorted(ranked)
    reasons = {s.layout: s.reason for s in res.result.skipped}
    assert "parallelism.pp" in reasons["32-4-1"]  # 32 stages for 44 encoders
    assert "global batch" in reasons["1-4-32"]  # dp 32 does not divide 4 x 4 x 4 sequences
    assert not set(reasons) & set(names)
    assert len(res.to_dict(top=1)["layouts"]) == 1
    assert res.to_dict()["layouts_tried"] == len(res.rows) + len(res.result.skipped)


def test_sweep_takes_the_cli_options_and_gives_the_cli_answer(small):
    full = trainsim.sweep(small, pp=[1, 2], mp=[1, 4], micro_batch=[1, 2], schedule=["1f1b", "gpipe"])
    pruned = trainsim.sweep(small, pp=[1, 2], mp=[1, 4], micro_batch=[1, 2], schedule=["1f1b", "gpipe"], top=2,
                            jobs=2)
    # branch and bound keeps the best two exactly; both schedules and micro-batch sizes were tried
    assert [(r.name, r.simulated_s) for r in pruned.rows[:2]] == [(r.name, r.simulated_s) for r in full.rows[:2]]
    assert {r.schedule for r in full.rows} == {"1f1b", "gpipe"} and {r.micro_batch for r in full.rows} == {1, 2}
    with pytest.raises(trainsim.ConfigError, match="schedule"):
        trainsim.sweep(small, schedule=["zigzag"])


def test_api_example_in_the_readme_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\n", text.index("## Python API")) + len("```python\n")
    code = text[start:text.index("```", start)]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_python_dash_m_trainsim(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trainsim", "scenarios"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gpt20b-dgxh100" in r.stdout


def test_import_trainsim_is_light():
    code = ("import sys, trainsim; trainsim.__version__; "
            "print(sorted(m for m in ('simpy', 'sklearn', 'xgboost', 'torch', 'matplotlib', 'networkx', 'yaml') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_simulation_progress_reports_simulated_time_and_changes_nothing(small, monkeypatch):
    import trainsim.sim.engine as engine

    monkeypatch.setattr(engine, "PROGRESS_EVERY", 11)  # many reports on a small run (one replica per stage)
    seen: list[float] = []
    with_progress = trainsim.simulate(small, progress=seen.append).result
    plain = trainsim.simulate(small).result
    assert len(seen) >= 5 and seen == sorted(seen)
    assert seen[-1] == with_progress.iteration_s == plain.iteration_s
    assert with_progress.events == plain.events and with_progress.breakdown == plain.breakdown
