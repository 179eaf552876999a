"""What fills a GPU's time beside the tensor cores, and the samples' own cap (calibration/power_cap.py:
``filler_classes``, ``PowerCapModel.factor(.., w)``, ``filler_weight``, ``sample_cap``; sim/costs.py)."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_power_cap import CAP, _costs, _times  # the same toy scenario and curve

from trainsim.calibration.power_cap import Curve, PowerCapModel, expected_max_normal, filler_classes, load_power_cap
from trainsim.operators import ConfigError
from trainsim.operators.ops import OpKind
from trainsim.sim.eq7 import eq7

ROOT = Path(__file__).resolve().parents[1]
COPY = Curve(((0.4, 1.0), (1.0, 1.2)))
GELU = Curve(((0.0, 1.0), (0.2, 1.2), (1.0, 1.2)))


def _model(**kw) -> PowerCapModel:
    return PowerCapModel("toy", {"bf16": COPY}, {"bf16": 1e15}, **kw)


def test_the_class_moves_the_factor_between_the_two_curves_by_hand():
    cap = _model(gelu_curves={"bf16": GELU})
    # D = 0.7: copy 1.0 + 0.2 * 0.3 / 0.6 = 1.1, GELU 1.2
    assert cap.factor("bf16", 0.7) == pytest.approx(1.1)
    assert cap.factor("bf16", 0.7, 1.0) == pytest.approx(1.2)
    assert cap.factor("bf16", 0.7, 0.25) == pytest.approx(1.125)
    assert cap.factor("fp8", 0.7, 1.0) == pytest.approx(1.2)  # fp8 has no curve of its own: bf16's
    assert _model().factor("bf16", 0.7, 1.0) == pytest.approx(1.1)  # no GELU curve: the copies' alone
    # a job's slowest GPU: the spread scaled by the depth against the same mix's g(1): (1.125 - 1) / (1.2 - 1)
    job = dataclasses.replace(cap, spread=0.02).slowest_of(8)
    assert job.factor("bf16", 0.7, 0.25) == pytest.approx(1.125 * (1 + 0.02 * 0.625 * expected_max_normal(8)))


def test_a_kind_is_priced_by_its_own_class_its_family_or_as_a_copy():
    cap = _model(filler_class={"hf_layernorm.fwd": 0.8, "hf_layernorm.bwd": 0.5, "hf_mlp_up.bwd": 1.0,
                               "hf_residual.fwd": 0.3, "hf_optimizer.update": 0.0})
    assert cap.filler_weight("hf_layernorm", "bwd") == 0.5  # its own
    assert cap.filler_weight("rmsnorm", "fwd") == 0.8  # its family's measured kind, same direction
    assert cap.filler_weight("linear3", "fwd") == 1.0  # a GEMM: the MLP-up GEMM's (measured backward only)
    assert cap.filler_weight("hf_residual", "bwd") == 0.3  # its other direction
    assert cap.filler_weight("embedding", "bwd") == 0.0  # nothing of its family measured: a copy
    assert _model().filler_weight("hf_layernorm", "fwd") == 0.0


def test_the_harness_timed_a_long_kernels_sample_partly_capped_by_hand():
    cap = _model(gelu_curves={"bf16": GELU}, onset_s=(0.030, 0.080))
    # timed runs i = 0..9 span (10 + i) to (11 + i) durations; the middle five of the sorted runs are i = 2..6
    assert cap.sample_cap("bf16", 1e-3, 1e-3, 0.0) == 1.0  # 12.5-16.5 ms in: before the onset
    # 5 ms, all tensor-core work (D = 1, g = 1.2): midpoints 62.5 ... 82.5 ms -> reached 0.65 0.75 0.85 0.95 1.0
    assert cap.sample_cap("bf16", 5e-3, 5e-3, 0.0) == pytest.approx(1.0 + 0.2 * 0.84)
    # half of it tensor-core work: its own stream at D = 0.5 (copy 1 + 0.2 * 0.1 / 0.6; GELU 1.2), that half slows
    g_half = 1.0 + 0.2 / 6.0
    assert cap.sample_cap("bf16", 5e-3, 2.5e-3, 0.0) == pytest.approx(1.0 + (g_half - 1.0) * 0.84 * 0.5)
    assert cap.sample_cap("bf16", 5e-3, 2.5e-3, 1.0) == pytest.approx(1.0 + 0.2 * 0.84 * 0.5)
    assert cap.sample_cap("bf16", 5e-3, 0.0, 1.0) == 1.0  # no tensor-core work: nothing to cap
    assert _model().sample_cap("bf16", 5e-3, 5e-3, 0.0) == 1.0  # no onset measured: the samples are bursts


def _class_rows(w: float) -> list[dict]:
    """A probe_power_class table whose copies and GELUs give a rising and a flat curve, and one kind whose
    mix lies ``w`` of the way between them: GEMM 1 ms burst, 1.2 ms sustained; each filler 0.125 ms
    sustained (its burst, longer, is not read)."""
    def row(kernel: str, burst: float, window: float, **kw) -> dict:
        return {"kernel": kernel, "round": 0, "gpu": 0, "burst_s": burst, "window_s": window, **kw}
    rows = [row("gemm_bf16_8192", 1e-3, 1.2e-3), row("copy_256mib", 1.4e-4, 1.25e-4),
            row("gelu_256mib", 1.4e-4, 1.25e-4)]
    # copies: D = 1 / (1 + 8 * 0.125) = 0.5 -> g 1.05; D = 1 / 1.5 -> 1.15; GELUs: 1.2 at both
    rows += [row("mix_bf16_c8", 2e-3, 1.0e-3 * 1.05 + 1e-3), row("mix_bf16_c4", 1.5e-3, 1.0e-3 * 1.15 + 5e-4),
             row("mix_bf16_e8", 2e-3, 1.2e-3 + 1e-3), row("mix_bf16_e4", 1.5e-3, 1.2e-3 + 5e-4)]
    g = 1.05 + w * (1.2 - 1.05)  # the kind's mix at D = 0.5
    rows += [row("k.fwd", 1.4e-4, 1.25e-4), row("mix:k.fwd", 2e-3, 1e-3 * g + 1e-3, n=8)]
    return rows


@pytest.mark.parametrize("w", [0.0, 0.3, 1.0])
def test_filler_classes_place_a_kind_between_its_chips_curves(tmp_path, w):
    path = tmp_path / "class.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _class_rows(w)))
    assert filler_classes([str(path)]) == {"k.fwd": pytest.approx(w, abs=1e-3)}
    beyond = tmp_path / "beyond.jsonl"  # slower than the GELUs: clamped to 1
    beyond.write_text("".join(json.dumps(r) + "\n" for r in _class_rows(1.5)))
    assert filler_classes([str(beyond)]) == {"k.fwd": 1.0}


def test_bad_classes_and_onset_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="filler_class"):
        _model(filler_class={"gelu.fwd": 1.5})
    with pytest.raises(ConfigError, match="onset_s"):
        _model(onset_s=(0.08, 0.03))
    bad = tmp_path / "power_cap.json"
    shipped = json.loads((ROOT / "calibration/profiles/h200-sxm-bf16/power_cap.json").read_text())
    bad.write_text(json.dumps({**shipped, "onset_s": [0.03]}))
    with pytest.raises(ConfigError, match="power_cap.json"):
        load_power_cap(bad)
    table = tmp_path / "t.jsonl"
    table.write_text(json.dumps({"kernel": "copy_256mib", "round": 0, "gpu": 0, "burst_s": 1, "window_s": 1}) + "\n")
    with pytest.raises(ConfigError, match="gemm_bf16_8192"):
        filler_classes([str(table)])
    no_gelu = tmp_path / "no_gelu.jsonl"  # a reference missing: one line naming it, from the command too
    no_gelu.write_text("".join(json.dumps(r) + "\n" for r in _class_rows(0.5) if r["kernel"] != "gelu_256mib"))
    with pytest.raises(ConfigError, match="gelu_256mib"):
        filler_classes([str(no_gelu)])
    spread = ROOT / "validation" / "gpu_spread_h200_1gpu_machineAK" / "spread.jsonl"
    r = subprocess.run([sys.executable, "-m", "trainsim.calibration.power_cap", str(spread), "--classes", str(no_gelu),
                        "--out", str(tmp_path / "o.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout.count("\n") == 1 and "gelu_256mib" in r.stdout
    assert not (tmp_path / "o.json").exists()


def test_build_costs_prices_each_stage_at_its_fillers_class():
    # every kind a GELU (w = 1): each stage's factor is the GELU curve's at its final share; no class: the
    # copy curve's, as before the classes
    gelu = dataclasses.replace(CAP, gelu_curves={"bf16": Curve(((0.0, 1.0), (0.1, 1.25), (1.0, 1.25)))})
    all_gelu = dataclasses.replace(gelu, filler_class={f"{k.value}.{d}": 1.0 for k in OpKind
                                                       for d in ("fwd", "bwd", "update")})
    assert _times(_costs(gelu)) == _times(_costs(CAP))  # a GELU curve without classes changes nothing
    on = _costs(all_gelu)
    for s, d in zip(on.stages, [m * s.compute_bound_s / eq7(on).iteration_s for m, s in
                                ((on.micro_batches, s) for s in on.stages)], strict=True):
        assert s.power_cap_factor == pytest.approx(1.25, abs=1e-9) and 0.1 < d < 1.0
    assert all(a.fwd_compute_s > b.fwd_compute_s for a, b in zip(on.stages, _costs(CAP).stages, strict=True))


def test_build_costs_takes_the_samples_own_cap_out_of_long_kernels_only():
    # an onset no sample reaches changes nothing; one at zero takes the whole sustained slowdown out of every
    # tensor-core kernel's sample before the run's own cap is put back (the roofline's kernels are all short:
    # with the measured onset, 30-80 ms, none of gpt20b's is touched)
    late = dataclasses.replace(CAP, onset_s=(9.0, 9.5))
    measured = dataclasses.replace(CAP, onset_s=(0.030, 0.080))
    at_once = dataclasses.replace(CAP, onset_s=(0.0, 1e-9))
    assert _times(_costs(late)) == _times(_costs(CAP))
    # measured: the roofline's kernels take at most 0.9 ms, but the last stage's LM head backward (1.9 ms):
    # its last timed runs reach the onset's start, so that stage alone moves
    touched = [a != b for a, b in zip(_times(_costs(measured)), _times(_costs(CAP)), strict=True)]
    assert touched == [False, False, False, True]
    assert all(a.fwd_compute_s < b.fwd_compute_s
               for a, b in zip(_costs(at_once).stages, _costs(CAP).stages, strict=True))


def test_the_onset_replays_the_harness_figures_measured_on_two_h200s():
    # validation/probe_sample_onset.py timed each kernel as the harness does and run by run from an idle GPU
    # (machines DD, DG): the harness's figure over the kernel's fastest run, against sample_cap's replay of the
    # protocol with the shipped onset (30 -> 80 ms, the two machines' mean) and classes
    cap = load_power_cap(ROOT / "calibration" / "profiles" / "h200-sxm-bf16" / "power_cap.json")
    misses = []
    for machine in ("DD", "DG"):
        for line in (ROOT / "validation" / f"sample_onset_h200_machine{machine}" / "sample_onset.jsonl").open():
            r = json.loads(line)
            burst = min(d for _, d in r["onset"])
            kind = "hf_attention" if r["kernel"].endswith("attn") else "hf_mlp_up"
            model = cap.sample_cap("bf16", burst, min(burst, r["flops"] / cap.reference_flops["bf16"]),
                                   cap.filler_weight(kind, "fwd"))
            misses.append(abs(model - r["harness_s"] / burst))
    assert len(misses) == 14 and max(misses) < 0.08 and sum(misses) / len(misses) < 0.025


def test_throttle_tables_write_the_steady_states_fastest_beside_its_median(tmp_path):
    # validation/throttle_tables.py re-reads a --pairs run: the committed burst, protocol and median tables
    # come out byte for byte, and the fastest of the load's second half with that median beside it
    folder = ROOT / "validation" / "throttle_onset_h200_machineDL"
    r = subprocess.run([sys.executable, str(ROOT / "validation" / "throttle_tables.py"), str(folder / "onset.jsonl"),
                        "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for figure in ("burst", "protocol", "sustained", "sustained_min"):
        assert (tmp_path / f"measured_{figure}.csv").read_text() == (folder / f"measured_{figure}.csv").read_text()
    fastest = list(csv.DictReader((tmp_path / "measured_sustained_min.csv").open()))
    median = list(csv.DictReader((tmp_path / "measured_sustained.csv").open()))
    assert len(fastest) == len(median) == 8
    for a, b in zip(fastest, median, strict=True):
        assert a["iteration_median_s"] == b["iteration_s"] and float(a["iteration_s"]) < float(b["iteration_s"])
