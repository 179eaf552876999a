"""profile.model efficiency: the slowdown over a GPU's roofline, transfer profiles, the learned roofline."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from trainsim.calibration import load_profile
from trainsim.calibration.efficiency import Roofline, load_roofline_table, saturated_slowdowns
from trainsim.calibration.profile import ExtrapolationWarning, fit_profile
from trainsim.calibration.roofline import RooflineProfile
from trainsim.calibration.samples import ComputeSample, read_compute
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind, bytes_moved, flops

REPO = Path(__file__).resolve().parents[1]

H100 = Roofline("h100-sxm", 989e12, 1979e12, 3.35e12, 14e-6)


def test_roofline_is_the_max_of_launch_compute_and_memory() -> None:
    gemm = Op(OpKind.LINEAR3, b=8, l=4096, d=8192, h=64)
    assert H100.seconds(gemm, Direction.FWD) == pytest.approx(flops(gemm, Direction.FWD) / 989e12)
    norm = Op(OpKind.LAYERNORM, b=8, l=4096, d=8192, h=64)
    assert H100.seconds(norm, Direction.FWD) == pytest.approx(bytes_moved(norm, Direction.FWD) / 3.35e12)
    tiny = Op(OpKind.LAYERNORM, b=1, l=8, d=64, h=1)
    assert H100.seconds(tiny, Direction.FWD) == 14e-6
    fp8 = Op(OpKind.FP8_LINEAR3, b=8, l=4096, d=8192, h=64)
    assert H100.seconds(fp8, Direction.FWD) == pytest.approx(flops(fp8, Direction.FWD) / 1979e12)
    # a residual add's backward moves nothing: the launch floor
    assert H100.seconds(Op(OpKind.RES_ADD, b=8, l=4096, d=8192), Direction.BWD) == 14e-6


def test_no_fp8_rate_is_one_clear_error() -> None:
    a100 = Roofline.for_gpu("a100-sxm4-80gb", 14e-6)
    with pytest.raises(ConfigError, match="no FP8 tensor cores"):
        a100.seconds(Op(OpKind.FP8_LINEAR1, b=1, l=1024, d=1024, h=8), Direction.FWD)
    with pytest.raises(ConfigError, match="unknown GPU 'z100'"):
        Roofline.for_gpu("z100", 1e-6)


def _synthetic(efficiency, shapes) -> list[ComputeSample]:
    """Samples whose time is the H100 roofline time over a known efficiency of the token count."""
    out = []
    for b, l, d in shapes:
        op = Op(OpKind.LINEAR3, b=b, l=l, d=d, h=d // 128)
        out.append(ComputeSample(op, Direction.FWD, H100.seconds(op, Direction.FWD) / efficiency(b * l) * 1e6))
    return out


def test_efficiency_fit_recovers_a_known_efficiency_and_scales_with_the_work_outside() -> None:
    def eff(tokens):
        return 0.8 * tokens / (tokens + 2048)
    shapes = [(b, l, d) for b in (1, 2, 4, 8) for l in (512, 1024, 2048, 4096) for d in (1024, 2048, 4096)]  # noqa: E741
    prof = fit_profile("toy", _synthetic(eff, shapes), [], 0, model="efficiency", roofline=H100)
    assert prof.regressors["op:linear3:fwd"].summary["target"] == "slowdown"
    inside = Op(OpKind.LINEAR3, b=4, l=2048, d=2048, h=16)
    expected = H100.seconds(inside, Direction.FWD) / eff(4 * 2048)
    assert prof.op_seconds([inside], Direction.FWD)[0] == pytest.approx(expected, rel=0.02)
    # above the sampled d: the edge's efficiency is held, the time grows with the FLOPs (d^2 here)
    edge = Op(OpKind.LINEAR3, b=8, l=4096, d=4096, h=32)
    beyond = Op(OpKind.LINEAR3, b=8, l=4096, d=16384, h=128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t_edge, t_beyond = (prof.op_seconds([o], Direction.FWD)[0] for o in (edge, beyond))
    assert t_beyond / t_edge == pytest.approx(16.0, rel=1e-9)
    assert any(issubclass(w.category, ExtrapolationWarning) and "efficiency at the edge" in str(w.message)
               for w in caught)
    # a duration fit of the same samples holds the edge's time instead (what issue 9 reported)
    dur = fit_profile("toy", _synthetic(eff, shapes), [], 0).with_extrapolation("edge")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        assert dur.op_seconds([beyond], Direction.FWD)[0] < 1.2 * dur.op_seconds([edge], Direction.FWD)[0]


def test_the_monotone_model_never_prices_more_work_faster_and_holds_the_edge_efficiency() -> None:
    # samples with a measured bump: 4,096 tokens run at 0.25 efficiency, every other count at 0.8
    # (what noise, or an algorithm switch, makes of real kernels). The unconstrained slowdown learns
    # the bump and prices 8,192 tokens faster than 4,096; profile.model monotone cannot.
    def eff(tokens: int) -> float:
        return 0.25 if tokens == 4096 else 0.8

    shapes = [(b, l, d) for b in (1, 2, 4) for l in (512, 1024, 2048, 4096) for d in (1024, 2048, 4096)]  # noqa: E741
    rows = _synthetic(eff, shapes) * 2
    free = fit_profile("toy", rows, [], 0, model="efficiency", roofline=H100)
    mono = fit_profile("toy", rows, [], 0, model="monotone", roofline=H100)
    reg = mono.regressors["op:linear3:fwd"]
    assert reg.summary["roofline_exponent"] == 0.8 and reg.summary["target"] == "slowdown"

    def t(prof, b: int, l: int, d: int = 2048) -> float:  # noqa: E741
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExtrapolationWarning)
            return float(prof.op_seconds([Op(OpKind.LINEAR3, b=b, l=l, d=d, h=d // 128)], Direction.FWD)[0])

    assert t(free, 2, 4096) < t(free, 2, 2048)  # the bump, learned: more work priced faster
    times = [t(mono, 2, l) for l in (1024, 1536, 2048, 3072, 4096)]  # noqa: E741
    assert times == sorted(times)
    # above the sampled d and roofline: the edge's efficiency is held, the time scales with the FLOPs
    assert t(mono, 4, 4096, 16384) / t(mono, 4, 4096, 4096) == pytest.approx(16.0, rel=1e-9)
    # a transfer of it prices the same slowdowns on the target's roofline
    a100 = mono.with_target(Roofline.for_gpu("a100-sxm4-80gb", 14e-6))
    assert t(a100, 4, 4096) == pytest.approx(t(mono, 4, 4096) * 989 / 312, rel=1e-9)


def test_efficiency_needs_a_roofline_and_a_known_model_name() -> None:
    with pytest.raises(ValueError, match="roofline"):
        fit_profile("toy", _synthetic(lambda t: 0.5, [(1, 512, 1024)] * 3), [], 0, model="efficiency")
    with pytest.raises(ConfigError, match="profile.model"):
        fit_profile("toy", [], [], 0, model="speed")


def test_transfer_prices_the_source_efficiency_on_the_target_roofline() -> None:
    h100 = load_profile("h100-sxm-bf16")
    a100 = load_profile("transfer:a100-sxm4-80gb")
    assert h100.model == "efficiency" and a100.name == "transfer:a100-sxm4-80gb"
    gemm = Op(OpKind.LINEAR1, b=4, l=2048, d=4096, h=32)
    norm = Op(OpKind.LAYERNORM, b=4, l=2048, d=4096, h=32)
    for op, ratio in ((gemm, 989 / 312), (norm, 3.35 / 2.039)):
        t_h, t_a = h100.op_seconds([op], Direction.FWD)[0], a100.op_seconds([op], Direction.FWD)[0]
        assert t_a / t_h == pytest.approx(ratio, rel=1e-9)
    # its collectives were measured on the H100's NVLink: the transfer has none (closed form)
    assert np.isnan(a100.collective_seconds([Collective(CollKind.ALL_REDUCE, 2**20, 1, 2)])[0])
    assert not np.isnan(h100.collective_seconds([Collective(CollKind.ALL_REDUCE, 2**20, 1, 2)])[0])


def test_h200_transfer_prices_operators_on_its_roofline_and_the_shipped_h200_profile_its_samples() -> None:
    transfer = load_profile("transfer:h200")
    h200 = load_profile("h200-sxm-bf16")
    h100 = load_profile("h100-sxm-bf16")
    assert transfer.target is not None and transfer.target.gpu == "h200"
    norm = Op(OpKind.LAYERNORM, b=8, l=4096, d=8192, h=64)  # memory-bound: 4.8 vs 3.35 TB/s
    assert h100.op_seconds([norm], Direction.FWD)[0] / transfer.op_seconds([norm], Direction.FWD)[0] == \
        pytest.approx(4.8 / 3.35, rel=1e-9)
    # the shipped H200 profile is fitted on its own samples: it prices a measured shape near its sample
    samples = [s for s in read_compute(REPO / "calibration" / "profiles" / "h200-sxm-bf16" / "compute.csv")
               if s.op.kind == OpKind.HF_MLP_UP and s.direction == Direction.FWD and s.duration_us > 200]
    assert len(samples) > 50
    pred = h200.op_seconds([s.op for s in samples], Direction.FWD)
    err = pred / np.array([s.duration_us * 1e-6 for s in samples]) - 1
    assert float(np.median(np.abs(err))) < 0.05
    ar = Collective(CollKind.ALL_REDUCE, 2**24, 1, 2)
    assert np.isfinite(h200.collective_seconds([ar])[0])
    assert h200.collective_seconds([ar])[0] != h100.collective_seconds([ar])[0]


def test_learned_roofline_table_is_the_saturated_slowdown() -> None:
    table = load_roofline_table()
    assert table["source"] == "h100-sxm-bf16" and table["launch_s"] > 0
    roof = RooflineProfile("roofline:h100", 989e12, 3.35e12, 1979e12)
    gemm = Op(OpKind.LINEAR1, b=4, l=2048, d=4096, h=32)
    work = flops(gemm, Direction.FWD) / 989e12
    assert roof.op_seconds([gemm], Direction.FWD)[0] == pytest.approx(work * table["slowdowns"]["linear1:fwd"])
    tiny = Op(OpKind.LAYERNORM, b=1, l=8, d=64, h=1)  # the launch floor, not scaled by the slowdown
    assert roof.op_seconds([tiny], Direction.FWD)[0] == table["launch_s"]
    # the rule: the median over the top quarter of roofline times
    small, large = Op(OpKind.GELU, b=1, l=256, d=512), Op(OpKind.GELU, b=8, l=4096, d=8192)
    rows = [ComputeSample(small, Direction.FWD, 100.0)] * 3 + [
        ComputeSample(large, Direction.FWD, H100.seconds(large, Direction.FWD) * 2e6)]
    assert saturated_slowdowns(rows, H100)["gelu:fwd"] == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="FP8 rate"):
        RooflineProfile("roofline:a100", 312e12, 2e12).op_seconds([Op(OpKind.FP8_LINEAR1, b=1, l=1024, d=1024,
                                                                         h=8)], Direction.FWD)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainsim", *args], capture_output=True, text=True, timeout=300)


def test_bad_transfer_gpu_and_fp8_without_rate_are_one_line_exit_2() -> None:
    r = _cli("predict", "gpt20b-dgxh100", "--set", "profile.name=transfer:z100")
    assert r.returncode == 2 and "profile.name" in r.stderr and "a100-sxm4-80gb" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _cli("predict", "llama3-8b-dgxh100", "--set", "profile.name=transfer:a100-sxm4-80gb",
             "--set", "training.precision=fp8")
    assert r.returncode == 2 and "FP8" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _cli("predict", "gpt20b-dgxh100", "--set", "profile.model=speed")
    assert r.returncode == 2 and "profile.model" in r.stderr


def test_profile_show_gives_both_models_validation_error() -> None:
    r = _cli("profile", "show", "h100-sxm-bf16", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["model"] == "efficiency" and data["validation_bar_pct"] == 20.0
    linear = next(x for x in data["regressors"] if x["operator"] == "linear1" and x["direction"] == "fwd")
    assert linear["validation_mape_pct"] > 0 and linear["duration_mape_pct"] > 0
    assert sorted(data["above_bar"]) == sorted(f"{x['operator']} {x['direction']}" for x in data["regressors"]
                                               if x["validation_mape_pct"] and x["validation_mape_pct"] > 20)
    # the measured power cap is shown with the regressors (calibration/power_cap.py)
    assert data["power_cap"]["bf16"][0][1] == 1.0 and data["power_cap"]["bf16"][-1][0] == 1.0
    assert 0.0 < data["power_cap_spread"] < 0.05  # the GPUs' spread under the cap, for a job's slowest
    # no H100 was probed for its kernels' filler classes or the cap's onset; the H200 was (its lines too)
    assert data["power_cap_filler_class"] == {} and data["power_cap_onset_s"] is None
    h200 = _cli("profile", "show", "h200-sxm-bf16")
    assert h200.returncode == 0, h200.stderr
    assert "beside GELUs instead of copies" in h200.stdout and "sets in 30-80 ms" in h200.stdout
    assert "hf_layernorm.fwd 0.83" in h200.stdout


def test_transfer_check_scores_the_h200_samples_with_the_h100_efficiencies() -> None:
    from trainsim.calibration.transfer_check import check_samples

    rows = check_samples(str(REPO / "calibration" / "profiles" / "h200-sxm-bf16"), "h100-sxm-bf16", min_us=100)
    by = {(r["operator"], r["direction"]): r for r in rows}
    assert all(r["gpu"] == "h200" and r["n"] > 0 for r in rows)
    gemm = [by[(k, d)] for k in ("linear1", "linear2", "linear3", "linear4") for d in ("fwd", "bwd")]
    n = sum(r["n"] for r in gemm)
    assert 0 < sum(r["mape_pct"] * r["n"] for r in gemm) / n < 10  # 5.2 % measured (5.0 % with the LM heads)
    # the memory-bound optimizer: the H200 reaches a smaller share of its 4.8 TB/s than the H100 of 3.35
    assert by[("hf_optimizer", "update")]["median_error_pct"] < 0
