"""Each lent machine's host factor against a profile's fixed host lines (calibration/host_factors.py)."""

import json
import warnings
from pathlib import Path

import pytest

from trainsim.calibration import load_profile
from trainsim.calibration.host_factors import (
    HOST_FACTORS_FILE,
    load_host_factors,
    machine_factors,
    main,
    with_host_factors,
)
from trainsim.calibration.host_overhead import load_host_overhead, row_points
from trainsim.operators.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "calibration" / "profiles"
H100_HOST = PROFILES / "h100-sxm-bf16" / "host_overhead.json"
SHIPPED = PROFILES / "h200-sxm-bf16" / HOST_FACTORS_FILE

TABLE = {"eager": {"per_layer_s": 0.002, "per_iteration_s": 0.004, "overlap": "overlapped",
                   "head_tail": {"head_fwd": 0.4, "head_bwd": 0.1, "tail_fwd": 0.3, "tail_bwd": 0.2}},
         "dtensor_tp": {"per_layer_s": 0.009, "per_iteration_s": 0.001, "overlap": "overlapped"}}


def _row(layout: str, layers: int, m: int, seconds: float, machine: str) -> dict[str, str]:
    return {"layout": layout, "layers": str(layers), "micro_batches": str(m), "min_s": repr(seconds),
            "device": "NVIDIA H200", "lease": machine, "name": f"host-L{layers}-m{m}"}


def _line(rt: str, steps: float) -> float:
    return TABLE[rt]["per_iteration_s"] + TABLE[rt]["per_layer_s"] * steps


def test_a_machine_whose_rows_are_the_lines_times_f_gets_f():
    rows = []
    for machine in ("fast", "slow"):
        for layout in ("1gpu", "tp2"):
            for layers, m in ((4, 4), (8, 4), (4, 8), (8, 8)):
                rows.append(_row(layout, layers, m, 0.0, machine))
    # the measured seconds: each row's line (its layer-steps with the eager runtime's head and tail) times f
    ends = {rt: e["head_tail"] for rt, e in TABLE.items() if "head_tail" in e}
    for r, (rt, steps, _, machine) in zip(rows, row_points(rows, ends), strict=True):
        r["min_s"] = repr({"fast": 0.8, "slow": 1.25}[machine] * _line(rt, steps))
    got = machine_factors(rows, TABLE)
    assert got == pytest.approx({"fast": 0.8, "slow": 1.25}, rel=1e-12)
    # the eager line's layer-steps count the head and tail: 4 layers, 4 micro-batches -> 4 * (4 + 1.0)
    (first,) = row_points(rows[:1], ends)
    assert first[1] == pytest.approx(20.0)


def test_each_runtime_weighs_the_same_on_a_machine():
    # one machine: its eager rows at x1.0 (four of them) and one tp2 row at x2.0. Weighted by runtime the
    # factor is the mean of the two runtimes' least-squares scales, whatever their row counts
    rows = [_row("1gpu", layers, m, _line("eager", m * (layers + 1.0)), "x") for layers, m in ((4, 4), (8, 4),
                                                                                               (4, 8), (8, 8))]
    rows.append(_row("tp2", 4, 4, 2.0 * _line("dtensor_tp", 16), "x"))
    e = [_line("eager", m * (layers + 1.0)) for layers, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    t = _line("dtensor_tp", 16)
    want = (sum(v * v for v in e) / 4 + 2.0 * t * t) / (sum(v * v for v in e) / 4 + t * t)
    assert machine_factors(rows, TABLE)["x"] == pytest.approx(want, rel=1e-12)


def test_a_machine_with_no_row_of_a_lined_runtime_is_an_error():
    with pytest.raises(ConfigError, match="machine y: no row"):
        machine_factors([_row("fsdp2", 4, 4, 0.1, "y")], TABLE)


def test_the_factors_replace_the_band_machines_not_the_lines():
    table = load_host_overhead(H100_HOST)
    out = with_host_factors(table, {"A": 0.9, "B": 1.2})
    for rt, e in out.items():
        assert e["lease_factors"] == {"A": 0.9, "B": 1.2} and e["leases"] == 2
        assert {k: v for k, v in e.items() if k not in ("lease_factors", "leases")} == \
            {k: v for k, v in table[rt].items() if k not in ("lease_factors", "leases")}


@pytest.mark.parametrize("text, why", [("{}", "machines"), ('{"machines": {"A": 1.0}}', "two or more"),
                                       ('{"machines": {"A": 1.0, "B": -1}}', "positive"),
                                       ("not json", "Expecting value")])
def test_a_bad_factors_file_names_itself(tmp_path, text, why):
    p = tmp_path / HOST_FACTORS_FILE
    p.write_text(text)
    with pytest.raises(ConfigError, match=why) as e:
        load_host_factors(p)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("profile", ["h200-sxm-bf16", "h100-sxm-bf16"])
def test_the_shipped_factors_are_what_their_command_gives(tmp_path, monkeypatch, profile):
    doc = json.loads((PROFILES / profile / HOST_FACTORS_FILE).read_text())
    args = [f"{m}={p}" for m, paths in sorted(doc["sources"].items()) for p in paths]
    monkeypatch.chdir(ROOT)  # the sources are repository paths
    out = tmp_path / "f.json"
    assert main([*args, "--against", doc["against"], "--out", str(out)]) == 0
    assert json.loads(out.read_text())["machines"] == doc["machines"]
    assert len(doc["machines"]) >= 9


def test_the_h200_profile_bands_with_its_own_hosts():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h200 = load_profile("h200-sxm-bf16")
        h100 = load_profile("h100-sxm-bf16")
    own = load_host_factors(SHIPPED)
    for rt, e in h200.host_overhead.items():
        assert e["lease_factors"] == own
        assert e["per_layer_s"] == h100.host_overhead[rt]["per_layer_s"]  # the borrowed lines, unchanged
    # the H200 hosts spread wider than the H100 machines the lines were fitted on
    fitted = json.loads(H100_HOST.read_text())["runtimes"]
    h100_fit = {m: f for e in fitted.values() for m, f in e["lease_factors"].items()}
    assert max(own.values()) > max(h100_fit.values()) and min(own.values()) < min(h100_fit.values())


def test_the_h100_profile_bands_with_its_fitted_hosts_and_a_later_one():
    """Against the lines held fixed, the fit's own machines get the factors the fit gave them (the
    alternating fit converged), and machine M, measured after the fit, is the slowest H100 host."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h100 = load_profile("h100-sxm-bf16")
    own = load_host_factors(PROFILES / "h100-sxm-bf16" / HOST_FACTORS_FILE)
    fitted = json.loads(H100_HOST.read_text())["runtimes"]["dtensor_tp"]["lease_factors"]
    for m, f in fitted.items():
        assert own[m] == pytest.approx(f, rel=1e-3), m
    assert max(own, key=own.__getitem__) == "M" and own["M"] > max(fitted.values())
    assert all(e["lease_factors"] == own for e in h100.host_overhead.values())
