"""The micro-benchmark harness (CPU, tiny shapes), the sampling plan and ``trainsim calibrate``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _support import BLOCK_TORCH

from trainsim.calibration.harness import robust_mean
from trainsim.calibration.samples import read_compute, read_meta
from trainsim.calibration.sampling import directions, parse_kinds, sampling_plan, sobol_points
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind

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


torch = pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")


def _tiny_plan() -> list[tuple[Op, Direction]]:
    plan = []
    for k in OpKind:
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
