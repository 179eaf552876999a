"""--train-tokens: a whole run's iterations, days, GPU-hours and node-hours, checked by hand and through the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import trainsim
from trainsim.operators.errors import ConfigError
from trainsim.scenarios.time_to_train import TimeToTrain, parse_token_count


@pytest.mark.parametrize("text,tokens", [
    ("2T", 2e12), ("300B", 3e11), ("300b", 3e11), ("1.5e12", 1.5e12), ("15t", 15e12), ("2.5M", 2.5e6),
    ("7k", 7e3), ("1G", 1e9), (" 42 ", 42.0), ("1e18", 1e18),
])
def test_token_counts_are_read_with_decimal_suffixes(text, tokens):
    assert parse_token_count(text) == tokens


@pytest.mark.parametrize("text", ["0", "-5", "abc", "2X", "1e19", "nan", "inf", "", "2TB", "1,000"])
def test_a_bad_token_count_names_the_option(text):
    with pytest.raises(ConfigError) as e:
        parse_token_count(text)
    assert e.value.field == "--train-tokens"


def test_the_run_is_whole_iterations_on_whole_nodes():
    # 1,000 tokens at 300 a step: 3.33 iterations, so 4 are run; 2 s each on 12 GPUs of 8-GPU nodes
    r = TimeToTrain(tokens=1000, tokens_per_iteration=300, iteration_s=2.0, gpus=12, gpus_per_node=8, basis="x")
    assert r.iterations == 4 and r.seconds == 8.0 and r.nodes == 2
    assert r.gpu_hours == pytest.approx(12 * 8 / 3600) and r.node_hours == pytest.approx(2 * 8 / 3600)
    assert r.days == pytest.approx(8 / 86400)
    exact = TimeToTrain(tokens=900, tokens_per_iteration=300, iteration_s=2.0, gpus=8, gpus_per_node=8, basis="x")
    assert exact.iterations == 3 and exact.nodes == 1


@pytest.mark.parametrize("field,kwargs", [
    ("tokens", {"tokens": float("nan")}), ("tokens", {"tokens": 0.5}), ("tokens", {"tokens": 1e19}),
    ("iteration_s", {"iteration_s": 0.0}), ("iteration_s", {"iteration_s": float("inf")}),
    ("scenario", {"gpus": 0}),
])
def test_a_run_that_cannot_be_priced_is_refused(field, kwargs):
    base = {"tokens": 1e9, "tokens_per_iteration": 1000, "iteration_s": 1.0, "gpus": 8, "gpus_per_node": 8,
            "basis": "x"}
    with pytest.raises(ConfigError) as e:
        TimeToTrain(**{**base, **kwargs})
    assert e.value.field == field


def test_the_api_prices_a_run_from_a_scenario():
    sc = trainsim.load_scenario("gptneox-h100")
    r = trainsim.time_to_train(sc, 0.5, "1B")
    assert r.tokens_per_iteration == sc.tokens_per_iteration == 4 * 4 * 2048
    assert r.iterations == math.ceil(1e9 / sc.tokens_per_iteration) and r.seconds == r.iterations * 0.5
    assert (r.gpus, r.nodes) == (1, 1)
    with pytest.raises(ConfigError):
        trainsim.time_to_train(sc, 0.5, "a lot")


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_run_prints_the_time_to_train_at_its_simulated_iteration(tmp_path):
    args = ("gptneox-h100", "--set", "parallelism.dp=2", "--set", "cluster.gpus_per_node=2", "-q")
    r = cli("run", *args, "--train-tokens", "2e9", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    t = d["time_to_train"]
    per_iteration = 4 * 4 * 2 * 2048  # b x m x dp x sequence
    assert t["tokens_per_iteration"] == per_iteration and t["iterations"] == math.ceil(2e9 / per_iteration)
    assert t["iteration_s"] == d["iteration_s"] and t["basis"] == "simulated"
    assert t["seconds"] == pytest.approx(t["iterations"] * d["iteration_s"], rel=1e-12)
    assert t["gpu_hours"] == pytest.approx(2 * t["seconds"] / 3600) and t["nodes"] == 1
    text = cli("run", *args, "--train-tokens", "2B", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "time to train 2B tokens" in text.stdout and f"{t['iterations']:,} iterations" in text.stdout
    assert "GPU-hours on 2 GPUs" in text.stdout and "steady-state iterations only" in text.stdout


def test_predict_prices_the_run_at_eq7_and_a_bad_count_is_one_line_exit_2(tmp_path):
    r = cli("predict", "gptneox-h100", "--train-tokens", "1e9", "--json", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["time_to_train"]["basis"] == "Eq. 7" and d["time_to_train"]["iteration_s"] == d["iteration_s"]
    bad = cli("predict", "gptneox-h100", "--train-tokens", "2 trillion", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("trainsim: error: --train-tokens: ") and bad.stderr.count("\n") == 1
    fit = cli("jitter", "fit", "log.csv", "--train-tokens", "2T", cwd=tmp_path)
    assert fit.returncode == 2 and "--train-tokens" in fit.stderr and fit.stderr.count("\n") == 1


def test_sweep_prices_the_run_at_the_best_layout(tmp_path):
    r = cli("sweep", "gptneox-h100", "--set", "parallelism.dp=2", "--set", "cluster.gpus_per_node=2",
            "--train-tokens", "1B", "--json", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    best = d["layouts"][0]
    t = d["time_to_train"]
    assert t["iteration_s"] == best["simulated_s"] and best["layout"] in t["basis"]
    assert t["iterations"] == math.ceil(1e9 / (4 * 4 * 2 * 2048))  # every layout keeps the global batch


def test_jitter_prices_the_run_at_the_mean_of_its_samples(tmp_path):
    r = cli("jitter", "gptneox-h100", "-n", "3", "--set", "simulation.mode=realistic", "--set",
            "parallelism.dp=2", "--set", "simulation.jitter.preset=vista",
            "--train-tokens", "1B", "--json", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["time_to_train"]["iteration_s"] == d["mean_s"] and d["time_to_train"]["basis"] == "jittered mean"
    assert len(set(d["samples_s"])) > 1  # jittered: the mean is not any one sample's time
