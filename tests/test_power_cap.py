"""The power cap under sustained load (calibration/power_cap.py) and how build_costs applies it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainsim.calibration.power_cap import (
    Curve,
    PowerCapModel,
    expected_max_normal,
    fit_curve,
    fit_power_cap,
    gpu_spread,
    load_power_cap,
    mix_points,
)
from trainsim.calibration.roofline import RooflineProfile
from trainsim.operators import ConfigError
from trainsim.operators.stages import build_stage_plans
from trainsim.scenarios.schema import load_scenario
from trainsim.sim.costs import build_costs, power_cap_shares
from trainsim.sim.eq7 import eq7

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "calibration" / "profiles"
H100_TABLES = [ROOT / "validation" / f"gpu_spread_h100_1gpu_machine{m}" / "spread.jsonl"
               for m in ("AJ", "AI", "AL", "AO")]
H200_TABLES = [ROOT / "validation" / "gpu_spread_h200_1gpu_machineAK" / "spread.jsonl",
               ROOT / "validation" / "gpu_spread_h200_4gpu_machineAH" / "v3_window" / "spread.jsonl"]
# the H200's GELU curve, its kernels' filler classes and the cap's onset (docs/efficiency.md, "What fills the time")
H200_CLASSES = [ROOT / "validation" / f"power_class_h200_machine{m}" / "power_class.jsonl" for m in ("DJ", "DK")]
# the GELU mixes at low shares (DO, DP) and with the FP8 GEMM (DQ, DR), 2026-11-29
H200_LOW_FP8 = [ROOT / "validation" / f"power_{t}_h200_machine{m}" / "spread.jsonl"
                for t, m in (("low_share", "DO"), ("low_share", "DP"), ("gelu_fp8", "DQ"), ("gelu_fp8", "DR"))]
H200_EXTRA = ["--gelu", str(ROOT / "validation" / "power_gelu_h200_machineDE" / "spread.jsonl"),
              *map(str, H200_CLASSES), *map(str, H200_LOW_FP8), "--classes", *map(str, H200_CLASSES),
              "--onset-ms", "30", "80"]


# -- the measured curve --------------------------------------------------------------------------------


def _row(kernel: str, burst: float, window: float, rnd: int = 0, gpu: int = 0) -> dict:
    return {"kernel": kernel, "round": rnd, "gpu": gpu, "name": "toy", "burst_s": burst, "window_s": window,
            "burst_rate": 1.0 / burst}


def test_mix_points_by_hand():
    # GEMM 1.0 ms burst, 1.1 ms sustained; a copy 0.25 ms burst, 0.24 sustained; the c2 mix 1.56 ms
    # sustained: D = 1 / (1 + 2 * 0.25) = 2/3, g = (1.56 - 2 * 0.24) / 1.0 = 1.08
    rows = [_row("gemm_bf16_8192", 1e-3, 1.1e-3), _row("copy_256mib", 2.5e-4, 2.4e-4),
            _row("mix_bf16_c2", 1.5e-3, 1.56e-3)]
    pts = mix_points(rows)
    assert pts[0] == ("bf16", 1.0, pytest.approx(1.1))
    assert pts[1][0] == "bf16" and pts[1][1] == pytest.approx(2 / 3) and pts[1][2] == pytest.approx(1.08)
    assert len(pts) == 2


def test_fit_curve_pools_extends_and_floors():
    # a slower point at a lower D is pooled with its neighbour; the lowest segment is extended to g = 1
    curve = fit_curve([(0.6, 1.02), (0.7, 1.06), (0.8, 1.05), (1.0, 1.10)])
    ds, gs = zip(*curve.knots, strict=True)
    assert gs[0] == 1.0 and list(gs) == sorted(gs)
    assert curve.factor(0.0) == 1.0 and curve.factor(1.0) == pytest.approx(1.10)
    assert curve.factor(0.75) == pytest.approx(1.055)  # the pooled (0.7, 0.8) knot: mean D 0.75, mean g 1.055
    # the first segment, (0.6, 1.02) to (0.75, 1.055), reaches 1 at D = 0.6 - 0.02 * 0.15 / 0.035
    assert ds[0] == pytest.approx(0.6 - 0.02 * 0.15 / 0.035, abs=1e-3)
    # points under 1 (a burst's noise) do not make a speed-up
    assert fit_curve([(0.5, 0.97), (1.0, 1.1)]).factor(0.5) == 1.0


@pytest.mark.parametrize("knots", [((0.5, 1.0),), ((0.5, 1.0), (0.4, 1.1)), ((0.5, 1.0), (0.8, 0.99)),
                                   ((0.5, 1.01), (0.8, 1.1)), ((0.5, 1.0), (1.2, 1.1))])
def test_curve_refuses_bad_knots(knots):
    with pytest.raises(ConfigError, match="power_cap.json"):
        Curve(knots)


def test_shipped_power_caps_are_what_the_command_writes(tmp_path):
    for tables, name, extra in ((H100_TABLES, "h100-sxm-bf16", []), (H200_TABLES, "h200-sxm-bf16", H200_EXTRA)):
        out = tmp_path / f"{name}.json"
        r = subprocess.run([sys.executable, "-m", "trainsim.calibration.power_cap", *map(str, tables), "--out",
                            str(out), *extra], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr
        written, shipped = json.loads(out.read_text()), json.loads((PROFILES / name / "power_cap.json").read_text())
        for key in ("curves", "spread", "spread_gpus", "gelu_curves", "filler_class", "onset_s"):
            assert written.get(key) == shipped.get(key), key
    assert "filler_class" not in shipped_h100() and "onset_s" not in shipped_h100()  # no H100 was probed so


def shipped_h100() -> dict:
    return json.loads((PROFILES / "h100-sxm-bf16" / "power_cap.json").read_text())


def test_the_h200s_kernels_fall_into_two_power_classes():
    # probed on two fresh H200s (DJ, DK): the kinds that keep the GPU at its cap alone (norms, the GELU, a
    # GEMM's time off the tensor cores) throttle the GEMM beside them nearly as a GELU does; those that draw
    # 550-635 W alone (the loss, the optimizer, the accumulation, the fused attention, the residual add) nearly
    # as a copy (docs/efficiency.md)
    h200 = load_power_cap(PROFILES / "h200-sxm-bf16" / "power_cap.json")
    for kind, direction in (("gelu", "fwd"), ("gelu", "bwd"), ("hf_mlp_up", "bwd"), ("hf_layernorm", "fwd")):
        assert h200.filler_weight(kind, direction) > 0.8, kind
    for kind, direction in (("hf_loss", "fwd"), ("hf_optimizer", "update"), ("hf_grad_accum", "update"),
                            ("hf_attention", "fwd"), ("hf_residual", "fwd")):
        assert h200.filler_weight(kind, direction) < 0.4, kind
    assert h200.onset_s == (0.03, 0.08) and 1.15 < h200.factor("bf16", 0.5, 1.0) < 1.19


def test_measured_h100_curve_says_what_the_docs_say():
    cap = load_power_cap(PROFILES / "h100-sxm-bf16" / "power_cap.json")
    assert cap.factor("bf16", 0.45) == 1.0  # a Hugging Face iteration's share: no slowdown
    assert 1.03 < cap.factor("bf16", 0.7) < 1.06
    assert 1.09 < cap.factor("bf16", 1.0) < 1.14 and 1.09 < cap.factor("fp8", 1.0) < 1.16
    assert 7e14 < cap.reference_flops["bf16"] < 8e14  # the 8192-cube GEMM's burst on an H100
    h200 = load_power_cap(PROFILES / "h200-sxm-bf16" / "power_cap.json")
    assert h200.factor("bf16", 0.5) > 1.03  # the H200 throttles at lower shares


def test_expected_maximum_of_n_normals():
    # the tabulated expectations of the largest of n standard normals (Tippett 1925; Harter 1961)
    for n, want in ((1, 0.0), (2, 0.5642), (4, 1.0294), (8, 1.4236), (100, 2.5076), (1000, 3.2414)):
        assert expected_max_normal(n) == pytest.approx(want, abs=2e-4)


def test_gpu_spread_pools_the_precisions_by_hand():
    # bf16: three GPUs at 0.99, 1.00, 1.01 ms (relative deviations -1, 0, +1 %: squares 2e-4, 2 dof);
    # fp8: GPU 0's two rounds average 0.98, GPU 1 1.02 (-2 %, +2 %: squares 8e-4, 1 dof); a lone GPU
    # adds nothing. Pooled: sqrt(1e-3 / 3)
    rows = [dict(_row("gemm_bf16_8192", 0.9, w, gpu=g), uuid=f"u{g}") for g, w in enumerate((0.99, 1.00, 1.01))]
    rows += [dict(_row("gemm_fp8_8192", 0.5, w, rnd=r, gpu=0), uuid="u0") for r, w in enumerate((0.97, 0.99))]
    rows += [dict(_row("gemm_fp8_8192", 0.5, 1.02, gpu=1), uuid="u1")]
    spread, gpus = gpu_spread(rows)
    assert gpus == 3 and spread == pytest.approx((1e-3 / 3) ** 0.5, rel=1e-9)
    assert gpu_spread(rows[:1]) == (0.0, 0)


def test_a_job_runs_at_its_slowest_gpus_throttle():
    cap = PowerCapModel("toy", {"bf16": Curve(((0.5, 1.0), (1.0, 1.2)))}, {"bf16": 1e15}, spread=0.01)
    assert cap.slowest_of(1).factor("bf16", 0.75) == cap.factor("bf16", 0.75) == pytest.approx(1.1)
    # at D = 0.75 half the full throttle: each GPU's spread is half of 1 %, and 64 GPUs' slowest is 2.34 sd out
    assert cap.slowest_of(64).factor("bf16", 0.75) == pytest.approx(1.1 * (1 + 0.005 * expected_max_normal(64)))
    assert cap.slowest_of(1024).factor("bf16", 0.4) == 1.0  # no throttle, no spread
    assert cap.slowest_of(8).factor("bf16", 0.9) < cap.slowest_of(64).factor("bf16", 0.9)
    with pytest.raises(ConfigError, match="spread"):
        PowerCapModel("toy", cap.curves, cap.reference_flops, spread=float("nan"))
    # the shipped H100's: 4 GPUs measured, about 1 %; a transfer keeps it
    h100 = load_power_cap(PROFILES / "h100-sxm-bf16" / "power_cap.json")
    assert 0.003 < h100.spread < 0.02 and h100.on("a100-sxm4-80gb", 0.5, 0.0).spread == h100.spread


def test_bad_power_cap_file_and_tables_are_one_line(tmp_path):
    bad = tmp_path / "power_cap.json"
    bad.write_text('{"gpu": "x", "curves": {"bf16": [[0.5, 1.0]]}, "reference_flops": {"bf16": 1e15}}')
    with pytest.raises(ConfigError, match="power_cap.json"):
        load_power_cap(bad)
    with pytest.raises(ConfigError, match="missing.jsonl"):
        fit_power_cap([str(tmp_path / "missing.jsonl")])
    r = subprocess.run([sys.executable, "-m", "trainsim.calibration.power_cap", str(tmp_path / "missing.jsonl"),
                        "--out", str(tmp_path / "o.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout.count("\n") == 1 and not (tmp_path / "o.json").exists()


# -- build_costs ----------------------------------------------------------------------------------------


def _costs(cap: PowerCapModel | None, power_cap: bool = True, overrides: tuple[str, ...] = ()):
    sc = load_scenario("gpt20b-dgxh100", ["profile.name=roofline", *overrides])
    model = RooflineProfile("roofline:toy", peak_flops=sc.cluster.gpu.peak_flops, mem_bw=sc.cluster.gpu.mem_bw,
                            peak_fp8=sc.cluster.gpu.peak_fp8)
    model.power_cap = cap  # type: ignore[attr-defined]
    plans = build_stage_plans(sc.model, sc.training, sc.parallelism)
    return build_costs(plans, sc.training, sc.parallelism, sc.cluster, model, power_cap=power_cap)


# the roofline's stages spend 24-31 % of the iteration in tensor-core work at the H100's peak
CAP = PowerCapModel("toy", {"bf16": Curve(((0.1, 1.0), (1.0, 1.2)))}, {"bf16": 9.89e14})


# a curve no share reaches: the tensor-core seconds are counted, nothing is slowed
LOW = PowerCapModel("toy", {"bf16": Curve(((0.99, 1.0), (1.0, 1.2)))}, {"bf16": 9.89e14})


def _times(costs):
    return [(s.fwd_compute_s, s.bwd_compute_s, s.mp_fwd_s, s.optimizer_s) for s in costs.stages]


def test_power_cap_slows_only_tensor_core_work_by_the_measured_factor():
    off = _costs(LOW)
    on = _costs(CAP)
    assert _costs(CAP, power_cap=False) == _costs(None)  # the switch prices the samples, as a profile without it
    assert _times(off) == _times(_costs(None))
    shares = power_cap_shares(off, eq7(off).iteration_s)
    assert all(0.2 < d < 0.4 for d in shares)
    for a, b in zip(off.stages, on.stages, strict=True):
        assert 1.02 < b.power_cap_factor < 1.07
        # what a micro-batch gains is the factor, less one, times its tensor-core seconds
        gained = (b.fwd_compute_s + b.bwd_compute_s) - (a.fwd_compute_s + a.bwd_compute_s)
        assert gained == pytest.approx((b.power_cap_factor - 1.0) * a.compute_bound_s, rel=1e-9)
        assert b.power_cap_s == pytest.approx(gained, rel=1e-12) and a.power_cap_s == 0.0  # what compare prints
        assert b.optimizer_s == a.optimizer_s and b.dp_bucket_s == a.dp_bucket_s  # memory-bound, communication
    # the fixed point: the share each stage was priced at is the one its slowed iteration gives
    final = power_cap_shares(on, eq7(on).iteration_s)
    for b, d in zip(on.stages, final, strict=True):
        assert b.power_cap_factor == pytest.approx(CAP.factor("bf16", d), abs=2e-3)
    assert any("power cap (toy" in n for n in on.notes) and not any("power cap" in n for n in off.notes)


def test_a_collectives_stretch_of_the_compute_counts_as_tensor_core_work():
    # FSDP2's gathers beside the GEMMs stretch them (interference_in_steps_s, per micro-batch); the GEMM
    # runs through that stretch with the collective beside it, so the share counts it with the GEMM's
    # own tensor-core seconds: m * (compute_bound_s + stretch) / T, by hand
    off = _costs(LOW)
    m = off.micro_batches
    stretched = dataclasses.replace(off, stages=tuple(dataclasses.replace(s, interference_in_steps_s=0.01 * (i + 1))
                                                      for i, s in enumerate(off.stages)))
    t = 2.0 * eq7(off).iteration_s
    for s, d0, d in zip(off.stages, power_cap_shares(off, t), power_cap_shares(stretched, t), strict=True):
        assert d0 == pytest.approx(m * s.compute_bound_s / t, rel=1e-12)
        assert d == pytest.approx(m * (s.compute_bound_s + 0.01 * (s.index + 1)) / t, rel=1e-12)
    assert power_cap_shares(stretched, 1e-9) == [1.0] * len(off.stages)  # a share, never above 1


def test_build_costs_prices_the_jobs_slowest_gpu():
    # gpt20b-dgxh100 is 128 GPUs: with a 2 % spread every stage's factor is its curve's at the final
    # share, times the slowest of 128 GPUs' excess
    spread = PowerCapModel("toy", CAP.curves, CAP.reference_flops, spread=0.02)
    alone, job = _costs(CAP), _costs(spread)
    final = power_cap_shares(job, eq7(job).iteration_s)
    for a, b, d in zip(alone.stages, job.stages, final, strict=True):
        assert b.power_cap_factor > a.power_cap_factor
        assert b.power_cap_factor == pytest.approx(spread.slowest_of(128).factor("bf16", d), abs=2e-3)
    assert any("the slowest of 128 GPUs" in n for n in job.notes)


def test_profile_power_cap_must_be_a_boolean():
    with pytest.raises(ConfigError, match="profile.power_cap"):
        load_scenario("gpt20b-dgxh100", ["profile.power_cap=sometimes"])


# -- the probe's own table (CPU: the arithmetic, not the GPU) -------------------------------------------


def test_probe_table_shows_each_gpu_against_the_mean_and_the_slowest():
    from validation_script import load_script

    probe = load_script("probe_gpu_spread")
    rows = [dict(_row("gemm_bf16_8192", 1e-3, w, gpu=g), window_ratio=w / 1e-3, sm_mhz_median=1500.0)
            for g, w in ((0, 1.0e-3), (1, 1.1e-3), (2, 1.2e-3))]  # mean 1.1 ms: 0.909, 1.000, 1.091
    line = probe.table(rows)[-1]
    assert "0.909 1.000 1.091" in line and "+9.09%" in line and "window/burst 1.100" in line
    assert "mix_bf16_i4" in probe.build_parser().parse_args(  # the idle mixes are named kernels too
        ["--gpus", "1", "--out", "x", "--kernels", "mix_bf16_i4,idle_i4"]).kernels


def test_a_transfer_carries_the_measured_curve_at_its_gpus_rate():
    cap = load_power_cap(PROFILES / "h100-sxm-bf16" / "power_cap.json")
    a100 = cap.on("a100-sxm4-80gb", 0.5, 0.0)  # half the tensor-core peak, no FP8
    assert a100.curves == cap.curves and "a100-sxm4-80gb" in a100.gpu
    assert a100.reference_flops == {"bf16": cap.reference_flops["bf16"] * 0.5}
    # the same FLOPs take twice the probe GEMM's time there, and FP8 work counts at the bf16 rate
    assert a100.tensor_core_seconds("bf16", 1e12) == pytest.approx(2 * cap.tensor_core_seconds("bf16", 1e12))
    assert a100.tensor_core_seconds("fp8", 1e12) == a100.tensor_core_seconds("bf16", 1e12)


def test_a_flat_curve_and_the_gelu_filler():
    # an elementwise filler with arithmetic kept an H200 at its cap (machine DE): g the same at every share
    # measured. The curve holds it from the lowest share to 1, and falls to no slowdown at D = 0
    curve = fit_curve([(0.33, 1.18), (0.5, 1.17), (0.8, 1.18), (1.0, 1.17)])
    assert curve.knots == ((0.0, 1.0), (0.33, 1.175), (1.0, 1.175))
    assert curve.factor(0.165) == pytest.approx(1.0875)
    # GEMM 1.0 ms burst; a GELU 0.25 ms burst, 0.24 sustained; the e2 mix 1.6 ms sustained:
    # D = 1 / (1 + 2 * 0.25) = 2/3, g = (1.6 - 2 * 0.24) / 1.0 = 1.12; the copy mixes are not read
    rows = [_row("gemm_bf16_8192", 1e-3, 1.1e-3), _row("gelu_256mib", 2.5e-4, 2.4e-4),
            _row("mix_bf16_e2", 1.5e-3, 1.6e-3), _row("copy_256mib", 2.5e-4, 2.4e-4),
            _row("mix_bf16_c2", 1.5e-3, 1.5e-3)]
    pts = mix_points(rows, "gelu")
    assert len(pts) == 2 and pts[1][1] == pytest.approx(2 / 3) and pts[1][2] == pytest.approx(1.12)
    assert mix_points(rows)[1][2] == pytest.approx(1.02)  # the copies' mix: (1.5 - 2 * 0.24) / 1.0


def test_a_level_fit_pools_every_share():
    # a filler that holds the chip at its cap alone: one level, the mean of every point, from the lowest share
    # measured; the same points fitted as a curve rise from the low share instead (pool-adjacent-violators)
    pts = [(0.11, 1.07), (0.2, 1.12), (0.33, 1.18), (0.66, 1.17), (1.0, 1.17)]
    level = fit_curve(pts, level=True)
    assert level.knots == ((0.0, 1.0), (0.11, 1.142), (1.0, 1.142))
    assert fit_curve(pts).knots[1] != (0.11, 1.142)


def test_the_gelu_mixes_sit_at_each_chips_own_lone_gemm_throttle():
    # DE, DJ, DK (D 0.32-0.89), DO, DP (0.10-0.20) and DQ, DR (bf16 0.48, FP8 0.11-0.68): every GELU mix's g
    # within 5 % of the same chip's lone GEMM (D = 1) and no trend in D, the reason the GELU curve is one
    # level (docs/efficiency.md, "The GELU level at low shares, and in FP8")
    tables = [ROOT / "validation" / "power_gelu_h200_machineDE" / "spread.jsonl", *H200_CLASSES, *H200_LOW_FP8]
    ratios = []
    for table in tables:
        rows = [dict(r, source=str(table)) for r in map(json.loads, table.read_text().splitlines())]
        for precision in ("bf16", "fp8"):
            pts = [(d, g) for p, d, g in mix_points(rows, "gelu") if p == precision]
            lone = [g for d, g in pts if d == 1.0]
            if lone:
                ratios += [(d, g / float(np.mean(lone))) for d, g in pts if d < 1.0]
    assert len(ratios) == 21 and min(d for d, _ in ratios) < 0.12
    assert all(0.95 < r < 1.05 for _, r in ratios)
    low, high = [r for d, r in ratios if d < 0.3], [r for d, r in ratios if d >= 0.3]
    assert abs(float(np.mean(low)) - float(np.mean(high))) < 0.02


def test_the_gelu_curve_of_machine_de_is_flat():
    # `--filler gelu` fits the H200's GELU mixes (machine DE): x1.17 from D = 0.33 to 1 where the copy
    # mixes of the same chip give 1.02 at 0.39 and 1.17 only at 1 (docs/efficiency.md)
    table = ROOT / "validation" / "power_gelu_h200_machineDE" / "spread.jsonl"
    gelu, copy = fit_power_cap([str(table)], "gelu"), fit_power_cap([str(table)])
    assert gelu["filler"] == {"bf16": "gelu"} and copy["filler"] == {"bf16": "copy"}
    g = Curve(tuple(tuple(k) for k in gelu["curves"]["bf16"]))
    c = Curve(tuple(tuple(k) for k in copy["curves"]["bf16"]))
    assert 1.15 < g.factor(0.4) < 1.19 and abs(g.factor(0.4) - g.factor(1.0)) < 1e-9
    assert c.factor(0.4) < 1.04 and 1.15 < c.factor(1.0) < 1.19


def test_the_cool_and_loaded_profile_table_pairs_each_configuration():
    """validation/probe_throttle_onset.py --profile-pairs: one line per configuration with both
    phases, its loaded busy time over its cool one; a configuration missing a phase is left out."""
    from validation_script import load_script

    probe = load_script("probe_throttle_onset")
    rows = [{"kind": "profile", "phase": "cool", "config": "c03", "wall_s": 0.28, "busy_s": 0.27, "gemm_s": 0.15},
            {"kind": "nvml", "phase": "profile:c03", "t": 0.1},
            {"kind": "profile", "phase": "loaded", "config": "c03", "wall_s": 0.29, "busy_s": 0.2754, "gemm_s": 0.16},
            {"kind": "profile", "phase": "cool", "config": "c09", "wall_s": 0.12, "busy_s": 0.11, "gemm_s": 0.08}]
    table = probe.profile_table(rows)
    assert len(table) == 2 and table[1].startswith("c03") and table[1].endswith("x1.020")
    assert "280.0" in table[1] and "290.0" in table[1]
