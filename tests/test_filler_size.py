"""validation/probe_filler_size.py's D and g, from hand-made rows (the probe itself needs a GPU)."""

from __future__ import annotations

import pytest
from validation_script import load_script

probe = load_script("probe_filler_size")


def test_a_mix_is_its_gemms_cool_share_and_their_sustained_stretch():
    rows = {"cube": {"cool_ms": 1.4, "sustained_ms": 1.68}, "adds": {"cool_ms": 0.9, "sustained_ms": 0.9},
            "cube+adds": {"cool_ms": 2.3, "sustained_ms": 2.44}, "small": {"cool_ms": 0.4, "sustained_ms": 0.47},
            "copies": {"cool_ms": 0.7, "sustained_ms": 0.7}, "small+copies": {"cool_ms": 0.6, "sustained_ms": 0.64},
            "idle8": {"cool_ms": 8.0, "sustained_ms": 8.0}, "cube+idle8": {"cool_ms": 13.6, "sustained_ms": 13.6}}
    lines = {line.split()[0]: line for line in probe.analyse(rows)}
    # cube+adds: D = 1.4 / 2.3; g = (2.44 - 0.9) / 1.4
    assert f"D {1.4 / 2.3:.2f}" in lines["cube+adds"] and f"g {1.54 / 1.4:.3f}" in lines["cube+adds"]
    # small+copies: three GEMMs and two of the seven copies; g = (0.64 - 0.2) / 0.4
    assert f"g {0.44 / 0.4:.3f}" in lines["small+copies"] and f"D {0.4 / 0.6:.2f}" in lines["small+copies"]
    # four cube GEMMs then the idle: g = (13.6 - 8.0) / 5.6 = 1.0
    assert "g 1.000" in lines["cube+idle8"]
    assert "cube+copies" not in lines  # no row measured


def test_every_mix_names_parts_that_are_measured_alone():
    alone = {name for name, gemm, _, filler, _ in probe.MIXES if not (gemm and filler)}
    for name, gemm, n_gemm, filler, n_fill in probe.MIXES:
        if gemm and filler:
            assert gemm in alone and probe.FILLER_ROWS.get(filler, filler) in alone, name
            assert n_gemm > 0 and n_fill > 0
    assert probe.PART_COUNTS["cube"] == 1 and probe.PART_COUNTS["small"] == 3


@pytest.mark.parametrize("name", ["cube", "copies", "idle4"])
def test_parts_alone_have_no_mix_line(name):
    rows = {name: {"cool_ms": 1.0, "sustained_ms": 1.0}}
    assert probe.analyse(rows) == []
