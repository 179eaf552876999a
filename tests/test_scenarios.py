"""Scenario files, overrides, and the CLI's one-line errors."""

import json
import subprocess
import sys

import pytest

from trainsim.operators import ConfigError
from trainsim.scenarios.cli import main
from trainsim.scenarios.schema import bundled_names, load_scenario

PAPER_CASES = ["gpt20b-4-4-8", "gpt20b-4-8-4", "gpt20b-8-4-4", "llama13b-4-8-2", "llemma7b-4-2-2"]


def test_ten_paper_cases_are_bundled():
    names = set(bundled_names())
    for case in PAPER_CASES:
        for cluster in ("perlmutter", "vista"):
            assert f"paper-{case}-{cluster}" in names


def test_every_bundled_scenario_loads():
    for name in bundled_names():
        sc = load_scenario(name)
        assert sc.gpus % sc.cluster.gpus_per_node == 0


def test_preset_and_overrides():
    sc = load_scenario("paper-gpt20b-4-4-8-perlmutter", ["training.micro_batches=8", "parallelism.pp=8",
                                                          "parallelism.dp=4", "model.hidden=4096"])
    assert sc.training.micro_batches == 8 and sc.parallelism.pp == 8
    assert sc.model.hidden == 4096 and sc.model.heads == 64  # the preset fills the rest
    assert sc.tokens_per_iteration == 4 * 8 * 4 * 2048


def test_numbers_with_an_exponent_and_no_point_are_numbers():
    # YAML 1.1 reads 1e9 as a string; the scenario loader takes YAML 1.2's floats too
    sc = load_scenario("paper-gpt20b-4-4-8-vista", ["simulation.jitter.congestion.nic.mean_on_s=1e9",
                                                     "simulation.jitter.congestion.nic.mean_off_s=2.5E-3",
                                                     "simulation.jitter.congestion.nic.bandwidth_factor=5e-1"])
    nic = sc.simulation.jitter["congestion"]["nic"]
    assert (nic["mean_on_s"], nic["mean_off_s"], nic["bandwidth_factor"]) == (1e9, 2.5e-3, 0.5)
    with pytest.raises(ConfigError, match="mean_on_s"):  # still no number
        load_scenario("paper-gpt20b-4-4-8-vista", ["simulation.jitter.congestion.nic.mean_on_s=1e9x",
                                                   "simulation.jitter.congestion.nic.mean_off_s=1",
                                                   "simulation.jitter.congestion.nic.bandwidth_factor=0.5"])


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


GOOD = """
model: {preset: llemma-7b}
training: {micro_batch: 4, micro_batches: 8}
parallelism: {pp: 4, mp: 2, dp: 2}
cluster: {preset: perlmutter}
profile: {name: roofline}
"""


@pytest.mark.parametrize(
    "text,overrides,needle",
    [
        ("model: [unclosed", [], "malformed YAML"),
        (GOOD + "bogus: 1\n", [], "bogus: unknown section"),
        (GOOD, ["model.colour=red"], "model.colour: unknown key"),
        (GOOD, ["model.preset=gpt-99"], "model.preset: unknown model preset"),
        (GOOD, ["cluster.preset=summit"], "cluster.preset"),
        (GOOD, ["parallelism.pp=1", "parallelism.dp=3"], "not a multiple of cluster.gpus_per_node"),
        (GOOD, ["parallelism.mp=3", "parallelism.dp=4"], "parallelism.mp: model.heads 32 is not divisible by mp 3"),
        (GOOD, ["parallelism.pp=64"], "parallelism.pp"),
        (GOOD, ["training.micro_batch=0"], "training.micro_batch: must be >= 1"),
        (GOOD, ["model.hidden=-4096"], "model.hidden"),
        (GOOD, ["training.precision=fp4"], "training.precision: unknown value"),
        (GOOD, ["training.precision=fp8"],
         "profile: roofline profile 'roofline:a100-sxm4-80gb': the GPU has no FP8 rate"),
        (GOOD, ["model.kv_heads=5"], "model.kv_heads: heads 32 is not divisible by kv_heads 5"),
        (GOOD, ["model.kv_heads=1"], "parallelism.mp: mp 2 > model.kv_heads 1: set parallelism.replicate_kv_heads"),
        (GOOD, ["parallelism.cp=3", "parallelism.dp=1"], "parallelism.cp: model.seq_len 4096 is not divisible"),
        (GOOD, ["parallelism.split=megatron", "parallelism.pp=3", "parallelism.dp=1", "parallelism.mp=8"],
         "parallelism.pp: Megatron's split needs the 32 encoders divisible by the 3"),
        (GOOD, ["model.mlp=geglu"], "model.mlp: unknown value"),
        (GOOD, ["profile.extrapolate=wild"], "profile.extrapolate: must be work or edge"),
        (GOOD, ["simulation.mode=fast"], "simulation.mode"),
        (GOOD, ["nonsense"], "--set: expected section.key=value"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, text, overrides, needle):
    path = write(tmp_path, text)
    argv = ["predict", path]
    for o in overrides:
        argv += ["--set", o]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trainsim: error: ")
    assert needle in err


def test_unknown_scenario_name(capsys):
    assert main(["predict", "no-such-scenario"]) == 2
    assert "unknown scenario 'no-such-scenario'" in capsys.readouterr().err


def test_missing_reference_data_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRAINSIM_REFERENCE_DATA", raising=False)
    missing = tmp_path / "nowhere"
    assert main(["predict", "paper-gpt20b-4-4-8-perlmutter", "--reference-data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and err.count("\n") == 1


def test_no_traceback_in_a_real_process(tmp_path):
    path = write(tmp_path, "model: [unclosed")
    r = subprocess.run([sys.executable, "-m", "trainsim", "predict", path], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""


def test_predict_json_on_roofline(tmp_path, capsys):
    assert main(["predict", write(tmp_path, GOOD), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_s"] > 0 and set(out["components"]) >= {"pipeline_s", "max_fwd_s", "max_bwd_s",
                                                                  "first_stage_sync_s", "max_update_s"}
    assert len(out["stages"]) == 4


def test_scenarios_lists_bundled(capsys):
    assert main(["scenarios"]) == 0
    assert "paper-llemma7b-4-2-2-vista" in capsys.readouterr().out


def test_config_error_type_has_field():
    with pytest.raises(ConfigError) as e:
        load_scenario("paper-gpt20b-4-4-8-perlmutter", ["parallelism.pp=0"])
    assert e.value.field == "parallelism.pp"


def test_operator_with_no_samples(tmp_path, capsys):
    """A profile that lacks an operator the stage plans need is an error naming it."""
    import numpy as np

    from trainsim.calibration.samples import ComputeSample, write_samples
    from trainsim.operators import Direction, Op, OpKind

    rng = np.random.default_rng(0)
    rows = []
    for kind in (OpKind.LINEAR1, OpKind.LINEAR2):  # far from everything GPT-20B needs
        for _ in range(20):
            b, d = int(rng.integers(1, 8)), int(rng.choice([1024, 2048, 4096]))
            for direction in (Direction.FWD, Direction.BWD):
                rows.append(ComputeSample(Op(kind, b=b, l=1024, d=d, h=16), direction, float(rng.uniform(10, 100))))
    samples = tmp_path / "my-gpu"
    write_samples(samples, (rows, []), {"gpu": "test"})
    assert main(["predict", write(tmp_path, GOOD), "--set", f"profile.name={samples}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no samples for operator" in err[0]


def test_sweep_ranks_layouts_at_the_same_global_batch(capsys):
    assert main(["sweep", "gpt20b-dgxh100", "--set", "profile.name=roofline", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 128 and out["global_batch"] == 4 * 16 * 4
    rows = out["layouts"]
    assert {"4-8-4", "8-4-4", "1-8-16"} <= {r["layout"] for r in rows}
    for r in rows:
        assert r["pp"] * r["mp"] * r["dp"] == 128
        assert 4 * r["micro_batches"] * r["dp"] == out["global_batch"]
        assert 0.0 <= r["bubble_share"] < 1.0 and r["simulated_s"] > 0
    fitting = [r["simulated_s"] for r in rows if r["fits_memory"]]
    assert fitting == sorted(fitting)
    reasons = {s["layout"]: s["reason"] for s in out["skipped"]}
    assert "heads" in reasons["1-128-1"] or "divisible" in reasons["1-128-1"]


def test_roofline_profile_follows_each_scenarios_gpu():
    from trainsim.scenarios.compose import duration_model

    a = duration_model(load_scenario("gpt20b-dgxh100", ["profile.name=roofline"]))
    b = duration_model(load_scenario("paper-gpt20b-4-4-8-vista", ["profile.name=roofline"]))
    assert a.name == "roofline:h100-sxm" and b.name == "roofline:gh200"
