"""The shipped H100 profile, the hf stage plans and `trainsim validate` (no torch needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _support import BLOCK_TORCH

from trainsim.operators import ConfigError, ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.ops import OpKind

ROOT = Path(__file__).resolve().parents[1]
MODEL = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("profile-cache"))


def test_hf_plan_structure():
    tr = TrainingSpec(micro_batch=2, micro_batches=5, recompute="full", framework="hf")
    (plan,) = build_stage_plans(MODEL, tr, Parallelism())
    fwd = {oc.op.kind: oc.count for oc in plan.forward}
    assert fwd[OpKind.HF_LAYERNORM] == 2 * 3 + 1 and fwd[OpKind.HF_QKV] == 3 and fwd[OpKind.HF_LOSS] == 1
    rec = {oc.op.kind: oc.count for oc in plan.recompute}
    # the checkpoint's early stop: no dense_4h_to_h GEMM, no residual add, one weight cast instead
    assert OpKind.HF_MLP_DOWN not in rec and OpKind.HF_RESIDUAL not in rec
    assert rec[OpKind.HF_WEIGHT_CAST] == 3 and rec[OpKind.HF_MLP_UP] == 3
    assert plan.grad_accum is not None and plan.grad_accum_count == 4
    assert plan.optimizer.kind is OpKind.HF_OPTIMIZER
    # 3 layers * (4d + 3d(d+1) + d(d+1) + 4d(d+1) + d(4d+1)) + 2 v d + 2 d
    d = 256
    assert plan.params == 3 * (4 * d + 3 * d * (d + 1) + d * (d + 1) + 4 * d * (d + 1) + d * (4 * d + 1)) \
        + 2 * 50432 * d + 2 * d
    with pytest.raises(ConfigError, match="parallelism.schedule"):  # pipelining has no interleaved 1F1B here
        build_stage_plans(MODEL, tr, Parallelism(pp=2, schedule="interleaved-1f1b", virtual_stages=2))


def test_megatron_plans_do_not_change_with_the_default_framework():
    a = build_stage_plans(MODEL, TrainingSpec(), Parallelism(pp=1))
    b = build_stage_plans(MODEL, TrainingSpec(framework="megatron"), Parallelism(pp=1))
    assert a == b and a[0].grad_accum is None and a[0].grad_accum_count == 0


def test_shipped_profile_predicts_without_torch(cache):
    code = BLOCK_TORCH + (
        "from scenarios.cli import main\n"
        f"sys.exit(main(['predict', 'gptneox-h100', '--json', '--cache-dir', {cache!r},"
        " '--set', 'model.hidden=4096', '--set', 'model.heads=32', '--set', 'model.layers=4',"
        " '--set', 'training.micro_batch=2', '--set', 'training.micro_batches=8']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["profile"].startswith("h100-sxm-bf16")
    # measured on the H100 for this shape (c06): 0.4997 s; Eq. 7 without grad accumulation is within 10%
    assert 0.40 < out["iteration_s"] < 0.55
    assert "torch" not in r.stderr


def test_validate_meets_the_targets(cache, capsys):
    from trainsim.scenarios.cli import main

    assert main(["validate", "--json", "--cache-dir", cache]) == 0
    report = json.loads(capsys.readouterr().out)
    s = report["summary"]
    assert s["configurations"] >= 10
    assert s["time_mape_pct"] <= 5.0
    assert s["memory_max_abs_error_pct"] <= 10.0
    for row in report["configurations"]:
        assert row["predicted_s"] > 0 and row["predicted_gib"] > 0


def test_validate_prices_an_h200_table_as_an_h200_unless_told_otherwise(cache, capsys):
    # the H200 measured alone (validation/h200_solo): its rows name their GPU, so the shipped H200
    # profile prices them (3.27 % measured); --set profile.name keeps the user's choice (the H100's
    # profile on the H200's runs: 5.5 %, every row too slow)
    from trainsim.scenarios.cli import main

    table = str(ROOT / "validation" / "h200_solo" / "measured_h200_solo.csv")
    assert main(["validate", "--measured", table, "--json", "--cache-dir", cache, "-q"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert {r["profile"] for r in own["configurations"]} == {"h200-sxm-bf16"}
    assert own["summary"]["time_mape_pct"] <= 5.0
    assert main(["validate", "--measured", table, "--json", "--cache-dir", cache, "-q",
                 "--set", "profile.name=h100-sxm-bf16"]) == 0
    told = json.loads(capsys.readouterr().out)
    assert {r["profile"] for r in told["configurations"]} == {"h100-sxm-bf16"}
    slower = [a["predicted_s"] > b["predicted_s"] for a, b in zip(told["configurations"], own["configurations"],
                                                                    strict=True)]
    assert all(slower)
    assert main(["validate", "--measured", table, "--cache-dir", cache, "-q"]) == 0
    assert "(h200-sxm-bf16). Peak memory" in capsys.readouterr().out


def test_validate_a_timing_only_table_and_the_power_cap_against_sustained_training(cache, capsys):
    # validation/throttle_onset_h200_machineAN: the same iterations after idle gaps (burst), the fastest of
    # iterations 2-9 back to back (protocol, as train_gptneox.py reports), the fastest and the median of the
    # second half of 16 s of load (sustained_min, sustained), no memory measured. trainsim prices the minimum
    # iteration under the cap: the protocol and the steady state's fastest within 1.5 % (0.96 and 1.35 %
    # measured), above the burst (+1.2 % mean) and below the 16 s median (-2.7 % mean: under the cap the
    # iterations wander 2-3 % above their fastest, docs/efficiency.md)
    from trainsim.scenarios.cli import main

    folder = ROOT / "validation" / "throttle_onset_h200_machineAN"
    out = {}
    for figure in ("burst", "protocol", "sustained_min", "sustained"):
        assert main(["validate", "--measured", str(folder / f"measured_{figure}.csv"), "--json", "--cache-dir",
                     cache, "-q"]) == 0
        out[figure] = json.loads(capsys.readouterr().out)
    s = out["sustained"]["summary"]
    assert s["memory_mape_pct"] is None and s["memory_configurations"] == 0
    assert out["protocol"]["summary"]["time_mape_pct"] <= 1.5
    assert out["sustained_min"]["summary"]["time_mape_pct"] <= 1.5
    assert s["time_mape_pct"] <= 3.0
    mean = {f: sum(r["time_error_pct"] for r in o["configurations"]) / len(o["configurations"])
            for f, o in out.items()}
    assert mean["burst"] > 0.5 and mean["sustained"] < -1.0
    assert main(["validate", "--measured", str(folder / "measured_sustained.csv"), "--cache-dir", cache, "-q"]) == 0
    text = capsys.readouterr().out
    assert "Peak memory: not in the table." in text and "| – | – |" in text


def test_validate_rejects_a_table_without_the_columns(tmp_path, capsys):
    from trainsim.scenarios.cli import main

    bad = tmp_path / "m.csv"
    bad.write_text("name,iteration_s\nx,1.0\n")
    assert main(["validate", "--measured", str(bad)]) == 2
    assert "lacks columns" in capsys.readouterr().err


@pytest.mark.parametrize("time,memory,needle", [
    ("abc", "1e9", "line 2: iteration_s must be a positive number, got 'abc'"),
    ("nan", "1e9", "line 2: iteration_s"), ("-0.1", "1e9", "line 2: iteration_s"), ("", "1e9", "line 2: iteration_s"),
    ("0.1", "xyz", "line 2: max_memory_allocated_bytes must be a positive number or blank, got 'xyz'"),
    ("0.1", "0", "line 2: max_memory_allocated_bytes"),
])
def test_validate_rejects_a_cell_that_is_not_a_time_or_a_size(tmp_path, capsys, time, memory, needle):
    from trainsim.scenarios.cli import main

    bad = tmp_path / "m.csv"
    bad.write_text("name,hidden,heads,layers,seq_len,micro_batch,micro_batches,recompute,iteration_s,"
                   f"max_memory_allocated_bytes\nx,1024,16,4,512,2,1,none,{time},{memory}\n")
    assert main(["validate", "--measured", str(bad)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_compare_reports_the_closed_form_interference(cache, capsys):
    # the bundled CP2 scenario on the shipped profile (measured interference): the K/V ring's slowdown
    # beside the attention is inside the stage times, reported beside the attribution
    from trainsim.scenarios.cli import main

    assert main(["compare", "llama3-8b-dgxh100", "--json", "--cache-dir", cache, "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["interference_in_steps_s"]) == 1 and out["interference_in_steps_s"][0] > 0
    assert main(["compare", "llama3-8b-dgxh100", "--cache-dir", cache, "-q"]) == 0
    assert "measured interference inside the stage times" in capsys.readouterr().out


def test_compare_reports_the_power_cap(cache, capsys):
    # Llama 3 70B on the shipped profile keeps its GPUs in tensor-core work ~77 % of the iteration:
    # the measured power cap slows it, in Eq. 7 and the simulation alike, and compare says by how much
    from trainsim.scenarios.cli import main

    assert main(["compare", "llama3-70b-dgxh100", "--json", "--cache-dir", cache, "-q"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert len(on["power_cap_s"]) == 4 and min(on["power_cap_s"]) > 0
    assert main(["compare", "llama3-70b-dgxh100", "--json", "--cache-dir", cache, "-q",
                 "--set", "profile.power_cap=false"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["power_cap_s"] == [0.0] * 4 and off["eq7_s"] < on["eq7_s"]
    assert main(["compare", "llama3-70b-dgxh100", "--cache-dir", cache, "-q"]) == 0
    assert "measured power cap inside the stage times" in capsys.readouterr().out


def test_validate_applies_set_to_every_measured_multi_row(cache, capsys):
    # --set reaches the --measured-multi rows (train_3d.py's table here): the power cap off prices the
    # GEMM-heavy one-GPU rows faster; a bad key is one line naming it, exit 2
    from trainsim.scenarios.cli import main

    table = str(ROOT / "validation" / "measured_3d_h100_1gpu.csv")
    assert main(["validate", "--measured-multi", table, "--json", "-q", "--cache-dir", cache]) == 0
    on = {r["shape"]: r["simulated_s"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert main(["validate", "--measured-multi", table, "--json", "-q", "--cache-dir", cache,
                 "--set", "profile.power_cap=false"]) == 0
    off = {r["shape"]: r["simulated_s"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert on.keys() == off.keys() and all(off[k] <= on[k] for k in on) and off["d6144-L2-b4"] < on["d6144-L2-b4"]
    assert main(["validate", "--measured-multi", table, "--set", "profile.speed=2"]) == 2
    err = capsys.readouterr().err
    assert "profile.speed" in err and err.count("\n") == 1


def test_validate_counts_the_configurations_inside_their_host_band(cache, capsys):
    # the unseen4 table's host-bound rows (one GPU, small shapes) have a band; each band brackets
    # the prediction, and the summary counts the measurements inside by the rows' own numbers
    from trainsim.scenarios.cli import main

    table = str(Path(__file__).resolve().parents[1] / "validation" / "measured_unseen4_h100.csv")
    assert main(["validate", "--measured", table, "--json", "--cache-dir", cache]) == 0
    report = json.loads(capsys.readouterr().out)
    banded = [r for r in report["configurations"] if r["host_band_s"]]
    assert banded and report["summary"]["host_band_configurations"] == len(banded)
    for r in banded:
        lo, hi = r["host_band_s"]
        assert lo < r["predicted_s"] < hi
    assert report["summary"]["inside_host_band"] == sum(
        1 for r in banded if r["host_band_s"][0] <= r["measured_s"] <= r["host_band_s"][1])


def test_validate_splits_the_rows_the_gpu_paces_from_those_the_host_can(cache, capsys):
    # a row the GPU paces has no host band or one under 2 % of its prediction wide; the summary gives each
    # group's MAPE (validation/unseen15_broad_hf4_h200_1gpu_machineDL: four and ten rows)
    from trainsim.scenarios.cli import main

    table = str(ROOT / "validation" / "unseen15_broad_hf4_h200_1gpu_machineDL" / "measured_unseen15_h200.csv")
    assert main(["validate", "--measured", table, "--json", "--cache-dir", cache, "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows, s = out["configurations"], out["summary"]
    paced = [abs(r["time_error_pct"]) for r in rows
             if r["host_band_s"] is None or r["host_band_s"][1] - r["host_band_s"][0] < 0.02 * r["predicted_s"]]
    assert s["gpu_paced_configurations"] == len(paced) == 4 and s["host_paced_configurations"] == 10
    assert s["gpu_paced_mape_pct"] == pytest.approx(sum(paced) / 4) and s["gpu_paced_mape_pct"] < 3.0
    assert s["host_paced_mape_pct"] > s["gpu_paced_mape_pct"]
    assert main(["validate", "--measured", table, "--cache-dir", cache, "-q"]) == 0
    assert "The GPU paces 4 (no host band, or one under 2 % wide)" in capsys.readouterr().out
