"""validation/timeline_skew.py on a two-rank timeline worked by hand."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

import timeline_skew as ts  # noqa: E402

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _rank(rank, kernels, base=7):
    return {"layout": "tp2", "name": "s", "rank": rank, "base_ns": base, "kernels": kernels}


# rank 0: a GEMM 0-100 us, AR launched at 10 (GPU-set ready at 100); a GEMM 200-300, AR launched at 350
# (host-set ready at 350). rank 1: a GEMM 0-150, AR launched at 160 (host-set, ready 160); a GEMM
# 200-250, AR launched at 210 (GPU-set, ready 250). AR 1: rank 1 last (host), rank 0 waits 60 us;
# AR 2: rank 0 last (host), rank 1 waits 100 us.
R0 = [[0.0, 0.0, 100.0, "gemm"], [10.0, 100.0, 70.0, AR], [20.0, 200.0, 100.0, "gemm"], [350.0, 360.0, 5.0, AR]]
R1 = [[0.0, 0.0, 150.0, "gemm"], [160.0, 165.0, 5.0, AR], [170.0, 200.0, 50.0, "gemm"], [210.0, 250.0, 115.0, AR]]


def test_ready_times_by_hand():
    assert ts.ready_times(R0) == [(100.0, False), (350.0, True)]
    assert ts.ready_times(R1) == [(160.0, True), (250.0, False)]


def test_who_waits_for_whom():
    s = ts.skew({0: _rank(0, R0), 1: _rank(1, R1)})
    assert s["all_reduces"] == 2 and s["last"] == {0: 1, 1: 1}
    assert (s["last_set_by_host"], s["last_set_by_gpu"]) == (2, 0)
    assert s["wait_s"][0] == pytest.approx(60e-6) and s["wait_s"][1] == pytest.approx(100e-6)
    assert s["spread_median_s"] == pytest.approx(80e-6)


def test_clocks_that_differ_are_not_compared():
    assert "clocks differ" in ts.skew({0: _rank(0, R0, base=1), 1: _rank(1, R1, base=2)})["error"]


def test_cli(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(_rank(0, R0)) + "\n" + json.dumps(_rank(1, R1)) + "\n")
    assert ts.main([str(f)]) == 0
    assert "tp2" in capsys.readouterr().out
    f.write_text("{}\n")
    assert ts.main([str(f)]) == 2
    assert "line 1 is not a timeline record" in capsys.readouterr().err
