"""trainsim validate --measured-multi: reading either trainer's table, the scenario of a row, bad tables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainsim.operators import ConfigError
from trainsim.scenarios import compare_multi
from trainsim.scenarios.schema import scenario_from_mapping

HEADER = ("layout,world,dp,fsdp,tp,pp,schedule,name,hidden,heads,layers,seq_len,micro_batch,micro_batches,vocab,"
          "stage_layers,p2p_dtype,min_s,median_s,iters,max_mem_gib,loss,device,torch,transformers,nccl")


def _row(layout: str, dp: int, fsdp: int, tp: int, pp: int, schedule: str = "none", t: float = 0.2) -> str:
    world = dp * fsdp * tp * pp
    return (f"{layout},{world},{dp},{fsdp},{tp},{pp},{schedule},tiny,256,4,4,128,1,4,50432,4,none,{t},{t * 1.01},"
            f"8,1.0,11.0,NVIDIA H100 80GB HBM3,2.11,5.17,2.28")


def _table(tmp_path, *rows: str):
    p = tmp_path / "m.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


def test_rows_become_the_layout_they_ran(tmp_path):
    p = _table(tmp_path, _row("fsdp2xtp2", 1, 2, 2, 1), _row("pp2", 1, 1, 1, 2, "1f1b"), _row("1gpu", 1, 1, 1, 1))
    kind, rows = compare_multi.read_table(p)
    assert kind == "hf" and len(rows) == 3
    fsdp = compare_multi.scenario_mapping(kind, rows[0], "roofline:h100-sxm", "hgx-h100")
    assert fsdp["parallelism"] == {"pp": 1, "mp": 2, "dp": 2, "schedule": "1f1b"}
    assert fsdp["training"]["zero_stage"] == 3 and fsdp["training"]["framework"] == "hf"
    assert fsdp["cluster"] == {"preset": "hgx-h100", "gpus_per_node": 4}
    sc = scenario_from_mapping(fsdp)
    assert sc.gpus == 4 and sc.cluster.nics_per_node == 4
    one = compare_multi.scenario_mapping(kind, rows[2], "roofline:h100-sxm", "hgx-h100")
    assert one["training"]["zero_stage"] == 0 and one["cluster"]["gpus_per_node"] == 1


def test_rows_are_predicted_and_summarised(tmp_path):
    p = _table(tmp_path, _row("tp2", 1, 1, 2, 1), _row("dp2", 2, 1, 1, 1))
    table = compare_multi.rows(p, profile="roofline:h100-sxm", cluster="hgx-h100")
    assert [r["layout"] for r in table] == ["tp2", "dp2"]
    for r in table:
        assert r["simulated_s"] > 0
        assert r["simulated_err_pct"] == pytest.approx(100 * (r["simulated_s"] / 0.2 - 1))
        assert r["measured_gib"] == 1.0 and r["predicted_gib"] > 0
    s = compare_multi.summary(table)
    assert s["predicted"] == 2 and s["simulated_mape_pct"] == pytest.approx(
        sum(abs(r["simulated_err_pct"]) for r in table) / 2)
    assert "2 rows predicted" in compare_multi.render(table)
    # the rows' median (0.202 s) gives the second summary
    assert s["rows_with_median"] == 2 and s["simulated_vs_median_mape_pct"] == pytest.approx(
        sum(abs(100 * (r["simulated_s"] / 0.202 - 1)) for r in table) / 2)
    assert "against the median iteration (2 rows)" in compare_multi.render(table)


@pytest.mark.parametrize(("body", "match"), [
    ("layout,pp\n1gpu,1\n", "missing columns"),
    (HEADER + "\n", "no rows"),
    (HEADER + "\n" + _row("tp2", 1, 1, 2, 1).replace(",0.2,", ",-1,", 1), "min_s"),
    (HEADER + "\n" + _row("tp2", 1, 1, 2, 1).replace(",256,", ",x,", 1), "hidden"),
    (HEADER + "\n" + _row("tp2", 1, 1, 2, 1).replace(",0.202,", ",slow,", 1), "median_s"),
])
def test_bad_tables_name_the_file(tmp_path, body, match):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ConfigError, match=match) as e:
        compare_multi.read_table(p)
    assert "bad.csv" in str(e.value)


def test_a_table_may_give_the_minimum_alone(tmp_path):
    p = _table(tmp_path, _row("tp2", 1, 1, 2, 1).replace(",0.202,", ",,", 1))
    (row,) = compare_multi.rows(p, profile="roofline:h100-sxm", cluster="hgx-h100")
    assert row["measured_median_s"] is None and row["measured_s"] == 0.2


def test_an_unknown_gpu_needs_a_profile(tmp_path):
    p = _table(tmp_path, _row("tp2", 1, 1, 2, 1).replace("NVIDIA H100 80GB HBM3", "Some GPU"))
    with pytest.raises(ConfigError, match="profile-multi"):
        compare_multi.rows(p)


def test_the_command_fails_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trainsim", "validate", "--measured-multi", str(tmp_path / "nope.csv")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--measured-multi" in r.stderr


def test_attribution_splits_the_error_into_compute_and_the_rest(tmp_path):
    import json

    p = _table(tmp_path, _row("tp2", 1, 1, 2, 1, t=0.5), _row("dp2", 2, 1, 1, 1))
    trace = tmp_path / "m.kernels.jsonl"  # train_hf_parallel.py's summary, ".csv" dropped as committed
    trace.write_text(json.dumps({"layout": "tp2", "name": "tiny", "busy_s": 0.2, "compute_busy_s": 0.15,
                                 "wall_s": 0.6}) + "\n")
    kernels = compare_multi.read_kernels(p)
    table = compare_multi.rows(p, profile="roofline:h100-sxm", cluster="hgx-h100")
    (a,) = compare_multi.attribute(table, kernels)  # dp2 has no trace: not attributed
    r = table[0]
    sim_compute = r["breakdown"]["compute"] + r["breakdown"]["optimizer"]
    assert a["simulated_compute_s"] == pytest.approx(sim_compute) and a["measured_compute_s"] == 0.15
    assert a["measured_rest_s"] == pytest.approx(0.35)
    # the two gaps add up to the row's error in seconds
    assert a["compute_gap_s"] + a["rest_gap_s"] == pytest.approx(r["simulated_s"] - 0.5)
    assert "where the error sits" in compare_multi.render_attribution([a])


def test_attribution_without_a_trace_is_one_line(tmp_path):
    p = _table(tmp_path, _row("tp2", 1, 1, 2, 1))
    with pytest.raises(ConfigError, match="kernel trace"):
        compare_multi.read_kernels(p)
    (tmp_path / "m.kernels.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigError, match=r"m\.kernels\.jsonl:1"):
        compare_multi.read_kernels(p)
    r = subprocess.run([sys.executable, "-m", "trainsim", "validate", "--measured-multi", str(p), "--attribute"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "kernels.jsonl" in r.stderr


def test_the_summary_counts_the_rows_inside_their_host_band():
    def row(measured, band):
        return {"layout": "tp2", "shape": "s", "measured_s": measured, "measured_median_s": None,
                "simulated_s": 1.0, "closed_form_s": 1.0, "simulated_err_pct": 100 * (1 / measured - 1),
                "closed_form_err_pct": 100 * (1 / measured - 1), "memory_err_pct": None,
                "host_band_s": band, "host_factors": [0.85, 1.16] if band else None}

    table = [row(1.1, [0.9, 1.15]), row(1.2, [0.9, 1.15]), row(0.95, None)]
    s = compare_multi.summary(table)
    assert (s["host_band_rows"], s["inside_host_band"]) == (2, 1)
    assert ("host band (each row on the fastest and the slowest host measured for the profile, x0.85 to x1.16): "
            "2 rows have one, the measurement is inside it on 1") in compare_multi.render(table)
    # the rows the GPU paces: no band (0.95 s: +5.3 %) or one under 2 % of the prediction wide (1.0 to 1.015)
    narrow = [*table, row(0.98, [1.0, 1.015])]
    s = compare_multi.summary(narrow)
    assert s["gpu_paced_rows"] == 2
    assert s["gpu_paced_mape_pct"] == pytest.approx((100 * (1 / 0.95 - 1) + 100 * (1 / 0.98 - 1)) / 2)
    assert "the GPU paces 2 rows (no host band, or one under 2 % wide): simulated MAPE 3.7 %" in \
        compare_multi.render(narrow)
    # per layout: a dp2 row the GPU paces (no band, -10 %) beside the tp2 rows
    mixed = [*narrow, dict(row(1.0, None), layout="dp2", simulated_s=0.9, simulated_err_pct=-10.0)]
    s = compare_multi.summary(mixed)
    assert (s["layouts"]["tp2"]["gpu_paced_rows"], s["layouts"]["dp2"]["gpu_paced_rows"]) == (2, 1)
    assert s["layouts"]["dp2"]["gpu_paced_mape_pct"] == pytest.approx(10.0)
    assert "simulated MAPE 5.8 % (tp2 2, 3.7 %; dp2 1, 10.0 %)" in compare_multi.render(mixed)


def test_the_summary_gives_each_layout_its_mape_and_mean_error():
    def row(layout, err):
        return {"layout": layout, "shape": "s", "measured_s": 1.0, "measured_median_s": None,
                "simulated_s": 1 + err / 100, "closed_form_s": 1.0, "simulated_err_pct": err,
                "closed_form_err_pct": 0.0, "memory_err_pct": None, "host_band_s": None, "host_factors": None}

    # tp2: +4 and -6 (MAPE 5, mean -1); 1gpu: +2 (MAPE 2, mean +2)
    table = [row("tp2", 4.0), row("1gpu", 2.0), row("tp2", -6.0)]
    s = compare_multi.summary(table)
    # no host band: every row is GPU-paced
    assert s["layouts"] == {"tp2": {"rows": 2, "simulated_mape_pct": 5.0, "simulated_mean_err_pct": -1.0,
                                    "gpu_paced_rows": 2, "gpu_paced_mape_pct": 5.0},
                            "1gpu": {"rows": 1, "simulated_mape_pct": 2.0, "simulated_mean_err_pct": 2.0,
                                     "gpu_paced_rows": 1, "gpu_paced_mape_pct": 2.0}}
    assert "per layout, simulated MAPE (mean error): tp2 5.0 % (-1.0 %), 1gpu 2.0 % (+2.0 %)" in \
        compare_multi.render(table)
    # one layout: its summary is the table's, no per-layout line
    assert "per layout" not in compare_multi.render(table[:1])
