"""The micro-benchmark harness (CPU, tiny shapes), the sampling plan and ``trainsim calibrate``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _support import BLOCK_TORCH

from trainsim.calibration.harness import robust_mean
from trainsim.calibration.samples import read_compute, read_meta
from trainsim.calibration.sampling import (
    DEFAULT_KINDS,
    FP8_KINDS,
    FUSED_KINDS,
    OPT_IN_KINDS,
    directions,
    fp8_cast_widths,
    fp8_point,
    op_for,
    parse_kinds,
    sampling_plan,
    sobol_points,
)
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind, features

ROOT = Path(__file__).resolve().parents[1]


def test_robust_mean_is_the_mean_of_the_middle_five():
    xs = [100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, -50.0]
    # sorted: -50 1 2 3 4 5 6 7 8 100 -> drop the 2 lowest and 3 highest: 2 3 4 5 6
    assert robust_mean(xs) == pytest.approx(4.0)
    assert robust_mean([9.0, 1.0, 5.0, 3.0, 7.0, 100.0, -100.0]) == pytest.approx(5.0)  # 1 3 5 7 9
    assert robust_mean([2.0, 4.0]) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        robust_mean([])


def test_sobol_points_are_legal_and_seeded():
    pts = sobol_points(64, seed=3)
    assert pts == sobol_points(64, seed=3)
    assert pts != sobol_points(64, seed=4)
    for b, l, d, h, mp, layers in pts:
        assert b in (1, 2, 4, 8, 16) and b * l <= 40960
        assert l % 256 == 0 and 256 <= l <= 5120
        assert d % 512 == 0 and 512 <= d <= 8192
        assert d // h in (64, 128) and d % h == 0
        assert h % mp == 0 and 1 <= layers <= 12


def test_plan_puts_included_shapes_first_and_respects_the_budget():
    inc = [(Op(OpKind.LINEAR1, b=1, l=8, d=16, h=2), Direction.FWD)]
    plan = sampling_plan(parse_kinds("linear1,hf_optimizer"), budget=7, seed=0, include=inc)
    assert len(plan) == 7 and plan[0] == inc[0]
    assert len(set(plan)) == len(plan)
    assert all(dd in directions(o.kind) for o, dd in plan)
    assert all(o.mp == 1 and o.v == 50432 for o, _ in plan if o.kind is OpKind.HF_OPTIMIZER)
    with pytest.raises(ConfigError):
        parse_kinds("linear9")


FP8_LINEARS = (OpKind.FP8_LINEAR1, OpKind.FP8_LINEAR2, OpKind.FP8_LINEAR3, OpKind.FP8_LINEAR4)


def test_new_kinds_only_when_named_and_the_default_plan_is_unchanged():
    assert parse_kinds(None) == parse_kinds("all") == DEFAULT_KINDS
    assert not set(OPT_IN_KINDS) & set(DEFAULT_KINDS) and not set(OPT_IN_KINDS) & set(parse_kinds("megatron"))
    assert set(DEFAULT_KINDS) | set(OPT_IN_KINDS) == set(OpKind)
    assert parse_kinds("fp8") == FP8_KINDS
    default = sampling_plan(points=8, seed=1)
    assert not {o.kind for o, _ in default} & set(OPT_IN_KINDS)
    # the kinds before the new ones, in enum order: the rows and their order the plan always had
    assert default == sampling_plan([k for k in OpKind if k not in OPT_IN_KINDS], points=8, seed=1)


def test_fp8_and_swiglu_sampling_is_16_aligned_and_follows_the_bf16_shapes():
    from trainsim.calibration.harness import gemm_dims

    kinds = parse_kinds("swiglu,fp8_linear1,fp8_linear2,fp8_linear3,fp8_linear4,fp8_cast")
    plan = sampling_plan(kinds, points=32, seed=2)
    assert {o.kind for o, _ in plan} == set(kinds)
    assert all(dd in (Direction.FWD, Direction.BWD) for _, dd in plan)
    bf16 = {(o.kind, o.b, o.l, o.d, o.h, o.mp)
            for o, _ in sampling_plan(parse_kinds("gelu,linear1,linear2,linear3,linear4"), points=32, seed=2)}
    same = {OpKind.SWIGLU: OpKind.GELU, OpKind.FP8_LINEAR1: OpKind.LINEAR1, OpKind.FP8_LINEAR2: OpKind.LINEAR2,
            OpKind.FP8_LINEAR3: OpKind.LINEAR3, OpKind.FP8_LINEAR4: OpKind.LINEAR4}
    points = sobol_points(32, seed=2)
    for o, _ in plan:
        if o.kind in FP8_LINEARS:
            assert all(x % 16 == 0 for x in gemm_dims(o)), o
        if o.kind in same:
            assert (same[o.kind], o.b, o.l, o.d, o.h, o.mp) in bf16
    casts = {(o.b, o.l, o.d) for o, _ in plan if o.kind is OpKind.FP8_CAST}
    want = {(b, l, w) for b, l, d, h, mp, _ in points for w in fp8_cast_widths(d, mp)}
    assert casts == want
    assert fp8_cast_widths(1024, 4) == (1024, 256, 768, 2048)  # d, d/mp, f/mp = d, qkv/mp, 2f/mp
    cast = Op(OpKind.FP8_CAST, b=2, l=512, d=768)
    assert features(cast) == (2 * 512 * 768,)
    # a point off the grid is rounded up (whole heads kept)
    l, d, h = fp8_point(3, 100, 600, 5, 4)
    assert l == 112 and d % 64 == 0 and d >= 600 and d % h == 0 and d // h == 120
    assert all(x % 16 == 0 for x in gemm_dims(op_for(OpKind.FP8_LINEAR3, 3, 100, 600, 5, 4, 1)))
    # budget sizing counts fp8_cast's several widths per point
    assert len(sampling_plan(parse_kinds("fp8_cast"), budget=40, seed=0)) == 40


torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")


def _tiny_plan() -> list[tuple[Op, Direction]]:
    plan = []
    for k in OpKind:
        if k in FP8_KINDS or k in FUSED_KINDS:  # CUDA sm_89+ (the fp8 tests below); torch.compile (test_fused_kernels)
            continue
        op = Op(k, b=2, l=16, d=32, h=2, mp=1, v=64, layers=1)
        plan += [(op, dd) for dd in directions(k)]
    return plan


def test_every_operator_runs_on_cpu_and_the_table_is_valid(tmp_path):
    from trainsim.calibration.harness import make_env, run_plan

    env = make_env("cpu", "bf16", seed=0)
    plan = _tiny_plan()
    stats = run_plan(plan, tmp_path, env, "bf16", warmup=1, iters=2)
    assert stats == {"measured": len(plan), "skipped": 0, "failed": 0, "remaining": 0}
    rows = read_compute(tmp_path / "compute.csv")
    assert {(s.op, s.direction) for s in rows} == set(plan)
    assert all(s.duration_us > 0 for s in rows)
    meta = read_meta(tmp_path / "meta.json")
    assert meta["torch"] == torch.__version__ and meta["precision"] == "bf16" and meta["samples"] == len(plan)


def test_an_interrupted_run_resumes_without_duplicates(tmp_path):
    from trainsim.calibration.harness import make_env, run_plan

    env = make_env("cpu", "bf16", seed=0)
    plan = [(o, d) for o, d in _tiny_plan() if not o.kind.is_optimizer][:12]

    class Stop(Exception):
        pass

    def stop_after_5(k):
        if k == 5:
            raise Stop

    with pytest.raises(Stop):
        run_plan(plan, tmp_path, env, "bf16", warmup=1, iters=2, on_sample=stop_after_5)
    assert len(read_compute(tmp_path / "compute.csv")) == 5
    stats = run_plan(plan, tmp_path, env, "bf16", warmup=1, iters=2)
    assert stats["skipped"] == 5 and stats["measured"] == 7
    rows = read_compute(tmp_path / "compute.csv")
    keys = [(s.op, s.direction) for s in rows]
    assert len(keys) == len(set(keys)) == len(plan)
    with pytest.raises(ConfigError):  # one directory holds one precision
        run_plan(plan, tmp_path, env, "fp16", warmup=1, iters=2)


def test_calibrate_cli_on_cpu_with_configs(tmp_path, capsys):
    from trainsim.scenarios.cli import main

    cfg = tmp_path / "cfg.csv"
    cfg.write_text("name,hidden,heads,layers,seq_len,micro_batch,micro_batches,recompute\n"
                   "t,64,4,2,32,2,2,full\n")
    out = tmp_path / "samples"
    rc = main(["calibrate", "--out", str(out), "--device", "cpu", "--configs", str(cfg), "--ops", "hf",
               "--budget", "6", "--warmup", "1", "--iters", "2"])
    assert rc == 0
    rows = read_compute(out / "compute.csv")
    assert len(rows) == 6 and all(s.op.kind.value.startswith("hf_") for s in rows)
    assert all(s.op.d == 64 for s in rows)  # the configuration's own shapes come first
    assert "6 measured" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_calibrate_asking_for_cuda_without_cuda_exits_2(tmp_path, capsys):
    from trainsim.scenarios.cli import main

    rc = main(["calibrate", "--out", str(tmp_path / "x"), "--device", "cuda", "--budget", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "CUDA is not available" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()




def test_calibrate_without_torch_exits_2(tmp_path):
    code = (BLOCK_TORCH + "from scenarios.cli import main\n"
            f"sys.exit(main(['calibrate', '--out', {str(tmp_path / 'x')!r}, '--device', 'cpu', '--budget', '1']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "PyTorch is not installed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_swiglu_bench_shapes():
    from trainsim.calibration.harness import build_bench, make_env

    env = make_env("cpu", "bf16", seed=0)
    op = Op(OpKind.SWIGLU, b=2, l=16, d=32, h=2, mp=2, f=96)
    out = build_bench(op, Direction.FWD, env).run(0)
    assert out.shape == (32, 48) and out.dtype == torch.bfloat16  # [b*l, f/mp]
    (dx,) = build_bench(op, Direction.BWD, env).run(0)
    assert dx.shape == (32, 96)  # the fused gate-and-up output, 2f/mp


def test_fp8_gemm_operand_shapes():
    from trainsim.calibration.harness import fp8_gemm_operands

    e4, e5 = "float8_e4m3fn", "float8_e5m2"
    # b*l = 64; d = 256, mp = 2, f = 4d: LINEAR1 256 -> 384, LINEAR2 128 -> 256, LINEAR3 256 -> 512,
    # LINEAR4 512 -> 256
    for kind, (k, n) in zip(FP8_LINEARS, ((256, 384), (128, 256), (256, 512), (512, 256)), strict=True):
        op = Op(kind, b=2, l=32, d=256, h=4, mp=2)
        assert fp8_gemm_operands(op, Direction.FWD) == {"x": ((64, k), e4), "w": ((n, k), e4), "bias": ((n,), "half")}
        assert fp8_gemm_operands(op, Direction.BWD) == {"g": ((64, n), e5), "w_t": ((k, n), e4),
                                                        "g_t": ((n, 64), e5), "x_t": ((k, 64), e4)}
    gqa = Op(OpKind.FP8_LINEAR1, b=1, l=16, d=512, h=8, mp=2, kv=2)  # q 512 + k, v 2 x 64 each: 768 / 2
    assert fp8_gemm_operands(gqa, Direction.FWD)["w"][0] == (384, 512)
    odd = Op(OpKind.FP8_LINEAR2, b=1, l=10, d=40, h=2)  # dims padded up to multiples of 16
    assert fp8_gemm_operands(odd, Direction.FWD)["x"][0] == (16, 48)


def test_fp8_kinds_on_a_cpu_env_raise_a_clear_error(tmp_path, capsys):
    from trainsim.calibration.harness import build_bench, make_env, run_plan
    from trainsim.scenarios.cli import main

    env = make_env("cpu", "bf16", seed=0)
    for kind in FP8_KINDS:
        with pytest.raises(ConfigError, match=r"^--ops: cannot measure .*compute capability 8\.9"):
            build_bench(Op(kind, b=2, l=16, d=32, h=2), Direction.FWD, env)
    plan = [(Op(OpKind.GELU, b=2, l=16, d=32, h=2), Direction.FWD),
            (Op(OpKind.FP8_CAST, b=2, l=16, d=32), Direction.BWD)]
    with pytest.raises(ConfigError, match="fp8_cast"):
        run_plan(plan, tmp_path / "s", env, "bf16", warmup=1, iters=2)
    assert not (tmp_path / "s").exists()  # refused before anything was measured or written
    # the CLI: one line naming --ops, status 2
    rc = main(["calibrate", "--out", str(tmp_path / "c"), "--device", "cpu", "--ops", "swiglu,fp8", "--points", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not (tmp_path / "c").exists()
    assert err.startswith("trainsim: error: --ops: cannot measure fp8_cast, fp8_linear1") and len(err.splitlines()) == 1


def _cpu_scaled_mm_works() -> bool:
    try:
        a = torch.ones(16, 16).to(torch.float8_e4m3fn)
        s = torch.ones(())
        torch._scaled_mm(a, a.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)
    except (AttributeError, RuntimeError, TypeError, NotImplementedError):
        return False
    return True


@pytest.mark.skipif(not _cpu_scaled_mm_works(), reason="this torch has no CPU FP8 _scaled_mm")
def test_fp8_benches_run_on_cpu_when_forced(tmp_path):
    from trainsim.calibration.harness import E4M3_MAX, E5M2_MAX, build_bench, make_env, run_plan

    env = make_env("cpu", "bf16", seed=0)
    env.fp8 = True  # CPU _scaled_mm: the bodies run; timings mean nothing
    op = Op(OpKind.FP8_LINEAR3, b=2, l=16, d=32, h=2, mp=2)  # [32, 32] x [32, 64]
    y = build_bench(op, Direction.FWD, env).run(0)
    assert y.shape == (32, 64) and y.dtype == torch.bfloat16
    dgrad, wgrad = build_bench(op, Direction.BWD, env).run(0)
    assert dgrad.shape == (32, 32) and wgrad.shape == (64, 32) and dgrad.dtype == wgrad.dtype == torch.bfloat16
    cast = Op(OpKind.FP8_CAST, b=2, l=16, d=48)
    for dd, fmt, fmax in ((Direction.FWD, torch.float8_e4m3fn, E4M3_MAX), (Direction.BWD, torch.float8_e5m2, E5M2_MAX)):
        q = build_bench(cast, dd, env).run(0)
        assert q.shape == (32, 48) and q.dtype == fmt
        assert q.float().abs().max().item() == pytest.approx(fmax, rel=0.07)  # the amax maps onto the format's maximum
    assert env.notes["fp8_cast"].startswith("vector_norm")
    plan = [(Op(k, b=2, l=16, d=32, h=2, mp=1), dd) for k in FP8_KINDS for dd in directions(k)]
    stats = run_plan(plan, tmp_path, env, "bf16", warmup=1, iters=2)
    assert stats["measured"] == len(plan) == 10
    assert read_meta(tmp_path / "meta.json")["fp8_cast"] == env.notes["fp8_cast"]
