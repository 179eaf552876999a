"""scenarios/compare_3d.py on a synthetic measured CSV (no 3D measurements exist yet), roofline profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainsim.operators.errors import ConfigError
from trainsim.scenarios import compare_3d as c3d

HEADER = ("layout,pp,mp,dp,hidden,heads,layers,seq,micro_batch,micro_batches,recompute,min_s,median_s,"
          "max_mem_gib,device,torch,vocab\n")


def _csv(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "measured_3d.csv"
    p.write_text(HEADER + "".join(line + "\n" for line in lines))
    return p


def test_rows_price_each_layout_with_closed_form_and_simulation(tmp_path):
    p = _csv(tmp_path,
             "pp2-mp2-dp2,2,2,2,2048,16,8,2048,2,8,none,0.5,0.52,40.0,NVIDIA H200,2.11.0,50257",
             "pp1-mp8-dp1,1,8,1,4096,32,8,2048,1,4,full,0.3,0.31,30.0,NVIDIA H200,2.11.0,50257")
    table = c3d.rows(p, profile_name="roofline", host_gpus=8)
    assert [r["layout"] for r in table] == ["pp2-mp2-dp2", "pp1-mp8-dp1"]
    for r in table:
        assert r["closed_form_s"] > 0 and r["simulated_s"] > 0
        assert r["closed_form_err_pct"] == pytest.approx(100 * (r["closed_form_s"] / r["measured_s"] - 1))
        assert r["simulated_err_pct"] == pytest.approx(100 * (r["simulated_s"] / r["measured_s"] - 1))
        assert r["profile"].startswith("roofline")
    # the recompute layout re-runs every forward: dearer than the same layout without it
    p2 = _csv(tmp_path, "pp1-mp8-dp1,1,8,1,4096,32,8,2048,1,4,none,0.3,0.31,30.0,NVIDIA H200,2.11.0,50257")
    assert c3d.rows(p2, profile_name="roofline")[0]["closed_form_s"] < table[1]["closed_form_s"]


def test_scenario_mapping_describes_the_harness():
    row = {"layout": "pp2-mp2-dp1", "pp": "2", "mp": "2", "dp": "1", "hidden": "1024", "heads": "16",
           "layers": "4", "seq": "512", "micro_batch": "2", "micro_batches": "4", "recompute": "none",
           "vocab": "50257"}
    m = c3d.scenario_mapping(row, "roofline", host_gpus=8)
    assert m["cluster"] == {"preset": "dgx-h200", "gpus_per_node": 4}  # 4 of the host's 8 GPUs
    assert m["training"]["zero_stage"] == 0 and m["training"]["precision"] == "bf16"
    assert m["model"]["attention"] == "flash" and m["model"]["rotary"] is False
    assert m["parallelism"] == {"pp": 2, "mp": 2, "dp": 1, "schedule": "1f1b"}


def test_bad_measured_csv_names_the_file(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("layout,pp\nx,1\n")
    with pytest.raises(ConfigError, match="missing columns"):
        c3d.rows(p, profile_name="roofline")
    p = _csv(tmp_path, "pp1-mp1-dp1,1,1,1,256,4,2,128,1,1,none,0,0,1,cpu,2.13.0,256")
    with pytest.raises(ConfigError, match="min_s"):
        c3d.rows(p, profile_name="roofline")
