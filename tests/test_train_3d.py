"""validation/train_3d.py: TP, PP and DP reproduce single-process training (gloo, fp32, CPU).

Each layout runs under torchrun in a subprocess, dumps every rank's parameters after one
AdamW step, and the test reassembles the full tensors (MP shards concatenated along their
shard dimension, each layer taken from the stage that holds it) and compares them, and the
loss, with :func:`train_3d.reference_step`: the same model and global batch trained in one
process with plain ops. DP replicas and the replicated tensors of MP ranks must agree too.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from validation_script import load_script

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "validation" / "train_3d.py"
# adam_eps well above fp32 gradient noise: the key bias has an exactly-zero gradient (softmax
# ignores a constant added to every key), and eps=1e-8 would turn its rounding noise into a full
# lr-sized step whose sign differs between layouts.
MODEL = dict(hidden=32, heads=4, layers=4, seq=8, vocab=256, micro_batch=2, micro_batches=3, adam_eps=1e-4)
RTOL, ATOL = 1e-5, 1e-6


t3d = load_script("train_3d")


def _launch(tmp_path: Path, pp: int, mp: int, dp: int, *extra: str) -> subprocess.CompletedProcess:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={pp * mp * dp}",
           str(SCRIPT), f"--pp={pp}", f"--mp={mp}", f"--dp={dp}", *args, "--iters=1", "--warmup=0",
           "--backend=gloo", "--dtype=fp32", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _assemble(dump: Path, cfg) -> tuple[float, dict]:
    states = [torch.load(p) for p in sorted(dump.glob("rank*.pt"))]
    assert len(states) == cfg.world
    losses = {s["loss"] for s in states if s["loss"] is not None}
    assert len(losses) == 1, f"last-stage ranks disagree on the loss: {losses}"
    by_name: dict[str, dict[tuple[int, int], torch.Tensor]] = {}
    for s in states:
        _, j, k = s["coords"]
        for name, t in s["params"].items():
            by_name.setdefault(name, {})[(j, k)] = t
    full = {}
    for name, parts in by_name.items():
        dim = t3d.shard_dim(name)
        replicas = []
        for j in range(cfg.dp):
            shards = [parts[(j, k)] for k in range(cfg.mp)]
            if dim is None:  # replicated over MP: every MP rank must hold the same values
                for other in shards[1:]:
                    torch.testing.assert_close(other, shards[0], rtol=RTOL, atol=ATOL, msg=name)
                replicas.append(shards[0])
            else:
                replicas.append(torch.cat(shards, dim=dim))
        for other in replicas[1:]:  # DP replicas stay identical after the averaged update
            torch.testing.assert_close(other, replicas[0], rtol=0, atol=0, msg=name)
        full[name] = replicas[0]
    return losses.pop(), full


@pytest.mark.parametrize("pp,mp,dp", [(2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 1)])
def test_layout_matches_single_process_reference(tmp_path, pp, mp, dp):
    cfg = t3d.Config(pp=pp, mp=mp, dp=dp, **MODEL)
    _launch(tmp_path, pp, mp, dp, f"--dump={tmp_path / 'dump'}")
    loss, params = _assemble(tmp_path / "dump", cfg)
    ref_loss, ref = t3d.reference_step(cfg)
    assert loss == pytest.approx(ref_loss, rel=RTOL)
    assert set(params) == set(ref)
    assert len(ref) == 4 * len(t3d.LAYER_TENSORS) + 4
    before = {n: t3d.full_tensor(torch, cfg, n.rsplit(".", 1)[-1], int(n.split(".")[1]) if "." in n else -1,
                                 torch.device("cpu")) for n in ref}
    for name, want in ref.items():
        torch.testing.assert_close(params[name], want, rtol=RTOL, atol=ATOL, msg=name)
        # the step moved every tensor (a parameter without a gradient would stay put)
        assert not torch.equal(want, before[name]), name


def test_reference_catches_a_wrong_update():
    """The comparison has teeth: a different learning rate or a different batch is detected."""
    cfg = t3d.Config(**MODEL)
    loss, ref = t3d.reference_step(cfg)
    _, other = t3d.reference_step(t3d.Config(**MODEL, lr=2e-3))
    assert not torch.allclose(other["head_w"], ref["head_w"], rtol=RTOL, atol=ATOL)
    loss2, _ = t3d.reference_step(t3d.Config(**MODEL, dp=2))  # twice the global batch
    assert loss2 != pytest.approx(loss, rel=1e-4)


def _assert_is_the_reference_step(dump: Path, cfg) -> None:
    loss, params = _assemble(dump, cfg)
    ref_loss, ref = t3d.reference_step(cfg)
    assert loss == pytest.approx(ref_loss, rel=RTOL)
    for name, want in ref.items():
        torch.testing.assert_close(params[name], want, rtol=RTOL, atol=ATOL, msg=name)


def test_recompute_and_timing_row(tmp_path):
    """--recompute gives the same step; the CSV row has the documented columns."""
    cfg = t3d.Config(pp=2, mp=1, dp=1, recompute=True, **MODEL)
    out = tmp_path / "measured_3d.csv"
    _launch(tmp_path, 2, 1, 1, "--recompute", f"--dump={tmp_path / 'dump'}", f"--out={out}")
    _assert_is_the_reference_step(tmp_path / "dump", cfg)
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0]) == t3d.COLUMNS and len(rows) == 1
    r = rows[0]
    assert (r["layout"], r["recompute"], r["device"]) == ("pp2-mp1-dp1", "full", "cpu")
    assert 0 < float(r["min_s"]) <= float(r["median_s"]) and float(r["max_mem_gib"]) > 0


def test_a_micro_batch_sweep_times_each_count_in_one_launch(tmp_path):
    """--sweep-micro-batches: a row per count, in order; the first count's step is still the reference's."""
    cfg = t3d.Config(mp=2, **MODEL)
    out = tmp_path / "sweep.csv"
    _launch(tmp_path, 1, 2, 1, f"--sweep-micro-batches={MODEL['micro_batches']},1", f"--dump={tmp_path / 'dump'}",
            f"--out={out}", f"--kernels={tmp_path / 'k.jsonl'}")
    assert not (tmp_path / "k.jsonl").exists()  # --kernels profiles CUDA kernels: nothing on the CPU
    _assert_is_the_reference_step(tmp_path / "dump", cfg)
    rows = list(csv.DictReader(out.open()))
    assert [(r["layout"], r["micro_batches"]) for r in rows] == [("pp1-mp2-dp1", "3"), ("pp1-mp2-dp1", "1")]
    assert all(float(r["min_s"]) > 0 for r in rows)


@pytest.mark.parametrize("bad", ["0,2", "a", "2,,4"])
def test_a_bad_sweep_is_one_line_and_exit_2(bad, capsys):
    assert t3d.main([f"--sweep-micro-batches={bad}", "--backend=gloo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sweep-micro-batches" in err[0]


def test_config_rejects_bad_layouts():
    from trainsim.operators.errors import ConfigError

    for idle in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="--idle-s"):
            t3d.Config(idle_s=idle)
    with pytest.raises(ConfigError, match="--mp"):
        t3d.Config(mp=3, **MODEL)
    with pytest.raises(ConfigError, match="parallelism.pp"):
        t3d.Config(pp=4, **{**MODEL, "layers": 2})


def test_stage_split_and_micro_slices_cover_everything():
    cfg = t3d.Config(pp=2, dp=2, **MODEL)
    layers = [i for s in range(cfg.pp) for i in cfg.stage_layers(s)]
    assert layers == list(range(cfg.layers))
    assert list(cfg.stage_layers(0)) == [0, 1, 2]  # partition_encoders(4, 2) = (3, 1)
    rows = sorted(r for j in range(cfg.dp) for i in range(cfg.micro_batches)
                  for r in range(*t3d.micro_slice(cfg, j, i).indices(10**6)))
    assert rows == list(range(cfg.dp * cfg.micro_batches * cfg.micro_batch))


def test_the_course_records_every_iteration_and_idle_gaps_precede_the_timed_ones(tmp_path):
    """--course: one record per launch with every iteration (warm-up too) as (start, seconds), starts
    increasing by at least the previous iteration; --idle-s puts that many seconds before each timed one."""
    course = tmp_path / "course.jsonl"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", str(SCRIPT),
           *args, "--iters=3", "--warmup=1", "--backend=gloo", "--dtype=fp32", "--idle-s=0.3", f"--course={course}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    (rec,) = [json.loads(x) for x in course.read_text().splitlines()]
    assert (rec["warmup"], rec["hidden"], rec["recompute"]) == (1, MODEL["hidden"], "none")
    starts = [t for t, _ in rec["course"]]
    assert len(starts) == 4 and starts[0] == 0.0
    for (t0, dt), t1 in zip(rec["course"][:-1], starts[1:], strict=True):
        assert dt > 0 and t1 >= t0 + dt + 0.3  # the idle before every timed iteration is in the gap


def test_the_power_table_reads_the_figures_off_the_course(tmp_path):
    """validation/train3d_power_table.py: protocol = fastest of timed 1-8, sustained = the second half's
    fastest and median, burst = the median of the burst launch; --tables writes them as train_3d.py tables."""
    import json

    table = load_script("train3d_power_table")
    course = [(0.0, 2.0)] + [(2.0 + i, 1.0 + 0.01 * (i % 3)) for i in range(20)]  # warm-up 1, then 20 timed
    rec = {"hidden": 64, "heads": 4, "layers": 2, "seq": 16, "micro_batch": 1, "micro_batches": 2, "recompute": "none",
           "warmup": 1, "device": "cpu", "began_unix_s": 0.0, "course": course}
    burst = {**rec, "course": [(0.0, 2.0), (3.0, 0.9), (5.0, 0.95), (7.0, 0.92)]}
    (tmp_path / "course.jsonl").write_text(json.dumps(rec) + "\n")
    (tmp_path / "burst.jsonl").write_text(json.dumps(burst) + "\n")
    f = table.figures(rec, [])
    end = course[-1][0] + course[-1][1]
    half = [dt for t, dt in course if t >= end / 2]
    assert f["protocol_s"] == min(dt for _, dt in course[1:9]) == 1.0
    assert (f["half_min_s"], f["half_median_s"]) == (min(half), sorted(half)[len(half) // 2])
    assert table.main([str(tmp_path), "--tables"]) == 0
    rows = {n: list(csv.DictReader((tmp_path / f"measured_{n}.csv").open()))
            for n in ("burst", "protocol", "sustained_min")}
    assert tuple(rows["protocol"][0]) == t3d.COLUMNS
    assert float(rows["burst"][0]["min_s"]) == 0.92 and float(rows["protocol"][0]["min_s"]) == 1.0
    assert float(rows["sustained_min"][0]["median_s"]) == f["half_median_s"]
    assert (rows["protocol"][0]["layout"], rows["protocol"][0]["mp"]) == ("pp1-mp1-dp1", "1")  # no layout: one GPU
    (tmp_path / "course.jsonl").write_text(json.dumps({**rec, "layout": "pp2-mp1-dp1"}) + "\n")
    assert table.main([str(tmp_path), "--tables"]) == 0
    row = next(csv.DictReader((tmp_path / "measured_protocol.csv").open()))
    assert (row["layout"], row["pp"], row["mp"], row["dp"]) == ("pp2-mp1-dp1", "2", "1", "1")


@pytest.mark.parametrize("args, flag", [(["--profile-iters=0"], "--profile-iters"), (["--profile-iters=65"],
                                        "--profile-iters"), (["--timeline=t.jsonl"], "--timeline")])
def test_a_bad_profile_option_is_one_line_and_exit_2(args, flag, capsys):
    assert t3d.main([*args, "--backend=gloo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def _timeline(first: float, last: float) -> dict:
    """Two iterations of a GEMM (3 ms) and an add (1 ms) ten times each: the first iteration's GEMMs
    ``first`` times, the last's ``last`` times their 3 ms; launches inside each iteration's host span."""
    kernels, spans, t = [], [], 0.0
    for slow in (first, last):
        start = t
        for _ in range(10):
            for name, dur in (("nvjet_sm90_gemm", 3000.0 * slow), ("vectorized_elementwise_add", 1000.0)):
                kernels.append([t, t, dur, name])
                t += dur
        spans.append([start, t])
        t += 500.0
    return {"hidden": 64, "layers": 2, "micro_batch": 1, "micro_batches": 2, "recompute": "none",
            "kernels": kernels, "iterations": spans, "base_ns": 0}


def test_the_onset_analysis_matches_each_kernel_with_its_twin_in_the_last_iteration(tmp_path):
    """validation/train3d_onset.py: a GEMM 10 % slower in the last iteration reads x1.10 in every window the
    first iteration has kernels in, the adds x1.00, and the cool busy time is the first iteration's."""
    import json

    onset = load_script("train3d_onset")
    a = onset.analyse(_timeline(1.0, 1.1))
    assert a["cool_gemm"] == pytest.approx(1.1) and a["cool_other"] == pytest.approx(1.0)
    assert a["busy_ms"] == pytest.approx([40.0, 43.0])
    assert a["cool_busy_ms"] == pytest.approx(40.0)
    assert a["ratio_by_window"]["gemm:20-50"] == pytest.approx(1.1)
    assert a["ratio_by_window"]["gemm:50-100"] is None  # the first iteration ends at 40 ms
    path = tmp_path / "timeline.jsonl"
    path.write_text(json.dumps(_timeline(1.0, 1.0)) + "\n")
    assert onset.main([str(path), "--json"]) == 0
    assert onset.main([str(tmp_path / "missing.jsonl")]) == 2
    with pytest.raises(ValueError, match="two or more"):
        onset.analyse({**_timeline(1.0, 1.0), "iterations": [[0.0, 1e9]]})
