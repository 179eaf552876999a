"""calibration/fsdp_copies.py: FSDP2's measured copy kernels, interpolated by hand, and their bad inputs."""

import json
import math
from pathlib import Path

import pytest

from trainsim.calibration import fsdp_copies as fc
from trainsim.operators.errors import ConfigError

MiB = 2**20
REPO = Path(__file__).resolve().parents[1]


def _rates(**extra):
    # copy_out at 2 TB/s at 1 MiB and 4 TB/s at 4 MiB; chunk_cat at a flat 1 TB/s
    curves = {("copy_out", 2): ((MiB, MiB / 2e12), (4 * MiB, 4 * MiB / 4e12)),
              ("chunk_cat", 2): ((MiB, MiB / 1e12), (4 * MiB, 4 * MiB / 1e12))}
    curves.update(extra)
    return fc.FSDPCopyRates(curves)


def test_seconds_interpolate_the_rate_in_log_bytes():
    r = _rates()
    # 2 MiB is halfway in log(bytes): seconds per byte halfway between 1/2e12 and 1/4e12
    secs, measured = r.seconds("copy_out", 2, 2 * MiB)
    assert measured and secs == pytest.approx(2 * MiB * (0.5 / 2e12 + 0.5 / 4e12))
    assert r.seconds("copy_out", 2, MiB) == (pytest.approx(MiB / 2e12), True)
    assert r.seconds("chunk_cat", 2, 3 * MiB) == (pytest.approx(3 * MiB / 1e12), True)
    assert r.seconds("copy_out", 2, 0) == (0.0, True)


def test_outside_the_measured_sizes_or_worlds_the_edge_rate_and_a_flag():
    r = _rates()
    assert r.seconds("copy_out", 2, 16 * MiB) == (pytest.approx(16 * MiB / 4e12), False)
    assert r.seconds("copy_out", 2, MiB / 4) == (pytest.approx(MiB / 4 / 2e12), False)
    # world 8 unmeasured: the nearest measured world's curve, flagged even inside its sizes
    assert r.seconds("copy_out", 8, MiB) == (pytest.approx(MiB / 2e12), False)
    # two worlds measured: the nearest one, the larger on a tie
    r4 = _rates(**{})
    r4 = fc.FSDPCopyRates({**r4.curves, ("copy_out", 4): ((MiB, MiB / 3e12), (4 * MiB, 4 * MiB / 3e12))})
    assert r4.seconds("copy_out", 3, MiB)[0] == pytest.approx(MiB / 3e12)
    assert r4.seconds("copy_out", 8, MiB)[0] == pytest.approx(MiB / 3e12)


@pytest.mark.parametrize("curves, field, message", [
    ({("copy_out", 2): ((MiB, 1e-6),)}, "fsdp_copies", "no curve for chunk_cat"),
    ({("memcpy", 2): ((MiB, 1e-6),)}, "fsdp_copies", "unknown copy 'memcpy'"),
    ({("copy_out", 1): ((MiB, 1e-6),), ("chunk_cat", 2): ((MiB, 1e-6),)}, "fsdp_copies.copy_out.world1",
     "world must be an integer >= 2"),
    ({("copy_out", 2): ((MiB, 1e-6), (MiB, 2e-6)), ("chunk_cat", 2): ((MiB, 1e-6),)},
     "fsdp_copies.copy_out.world2", "sizes must increase strictly"),
    ({("copy_out", 2): ((MiB, -1e-6),), ("chunk_cat", 2): ((MiB, 1e-6),)}, "fsdp_copies.copy_out.world2",
     "must be positive and finite"),
    ({("copy_out", 2): ((MiB, math.nan),), ("chunk_cat", 2): ((MiB, 1e-6),)}, "fsdp_copies.copy_out.world2",
     "must be positive and finite"),
])
def test_bad_curves_name_the_field(curves, field, message):
    with pytest.raises(ConfigError) as e:
        fc.FSDPCopyRates(curves)
    assert e.value.field == field and message in str(e.value)


def _row(op, world, nbytes, secs, device="GPU X"):
    return {"op": op, "unit": "layer", "hidden": 1024, "world": world, "bytes": nbytes, "seconds": secs,
            "device": device}


def test_fit_keeps_the_median_per_size_and_leaves_the_reference_kernels_out(tmp_path):
    rows = [_row("copy_out", 2, MiB, s) for s in (1e-6, 3e-6, 2e-6)] + [_row("chunk_cat", 2, MiB, 4e-6),
            _row("accumulate", 2, MiB, 9e-6), _row("copy_in", 2, MiB, 5e-6)]
    doc = fc.fit_rows(rows, "probe.jsonl")
    assert doc["curves"] == {"chunk_cat/2": [[MiB, 4e-6]], "copy_in/2": [[MiB, 5e-6]], "copy_out/2": [[MiB, 2e-6]]}
    assert doc["device"] == "GPU X"
    path = tmp_path / "fsdp_copies.json"
    path.write_text(fc.dumps(doc))
    assert fc.load_fsdp_copies(path).seconds("copy_out", 2, MiB) == (pytest.approx(2e-6), True)


def test_a_table_without_the_gather_copy_in_still_loads():
    # written before the all-gather's copy-in was priced: the simulation leaves it uncharged
    rates = fc.FSDPCopyRates({("copy_out", 2): ((MiB, 1e-6),), ("chunk_cat", 2): ((MiB, 1e-6),)})
    assert not rates.has("copy_in") and rates.has("copy_out")


def test_fit_refuses_two_gpus_and_rows_without_their_fields():
    with pytest.raises(ConfigError, match="several GPUs"):
        fc.fit_rows([_row("copy_out", 2, MiB, 1e-6), _row("chunk_cat", 2, MiB, 1e-6, device="GPU Y")])
    with pytest.raises(ConfigError, match="needs op, world, bytes and seconds"):
        fc.fit_rows([{"op": "copy_out", "world": 2}], "p.jsonl")


def test_cli_bad_file_is_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"op": "copy_out"}\nnot json\n')
    out = tmp_path / "out.json"
    assert fc.main([str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "line 2" in err and "\n" not in err and not out.exists()


def test_a_broken_profile_file_is_one_clear_error(tmp_path):
    p = tmp_path / "fsdp_copies.json"
    p.write_text(json.dumps({"curves": {"copy_out/x": [[1, 1]]}}))
    with pytest.raises(ConfigError, match="copy/world"):
        fc.load_fsdp_copies(p)
    p.write_text("{")
    with pytest.raises(ConfigError, match="cannot read FSDP copy rates"):
        fc.load_fsdp_copies(p)


@pytest.mark.parametrize("profile, device, rate_out, rate_cat", [
    ("h100-sxm-bf16", "NVIDIA H100 80GB HBM3", 2.82e12, 2.60e12),
    ("h200-sxm-bf16", "NVIDIA H200", 3.96e12, 3.30e12),
])
def test_shipped_profiles_carry_their_own_gpus_copies(profile, device, rate_out, rate_cat):
    path = REPO / "calibration" / "profiles" / profile / fc.FSDP_COPIES_FILE
    rates = fc.load_fsdp_copies(path)
    assert rates.device == device
    layer = 8 * 201_379_840  # a d = 4096 layer's fp32 values, read and written (the probe's bytes)
    for op, rate in (("copy_out", rate_out), ("chunk_cat", rate_cat)):
        secs, measured = rates.seconds(op, 2, layer)
        assert measured and layer / secs == pytest.approx(rate, rel=0.03)
    # the all-gather's copy-in moves the rank's shard: half a layer's values over 2 ranks, at a
    # rate below the copy-out's (many tensors, one kernel per group)
    secs, measured = rates.seconds("copy_in", 2, layer / 2)
    assert measured and 0.8 * rate_out < layer / 2 / secs < rate_out


@pytest.mark.parametrize("profile, probe", [("h100-sxm-bf16", "fsdp_copies_h100_machineAY"),
                                            ("h200-sxm-bf16", "fsdp_copies_h200_machineAX")])
def test_shipped_copies_are_the_fit_of_the_committed_probe(profile, probe):
    root = REPO
    rows = root / "validation" / probe / "fsdp_copies.jsonl"
    doc = fc.fit_rows(fc.read_rows([str(rows)]), source=f"validation/{probe}/fsdp_copies.jsonl")
    assert (root / "calibration" / "profiles" / profile / fc.FSDP_COPIES_FILE).read_text() == fc.dumps(doc)
