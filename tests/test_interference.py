"""calibration/interference.py (fit, files, errors) and interference_bench.py (plan, guard, a real gloo run)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainsim.calibration import interference as itf
from trainsim.calibration import interference_bench as ib
from trainsim.operators.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def row(compute, collective, nbytes, comp_alone, comp_ov, coll_alone, coll_ov, coverage=None, shape="s"):
    return {"compute": compute, "compute_shape": shape, "collective": collective, "coll_bytes": nbytes,
            "compute_alone_us": comp_alone, "compute_overlap_us": comp_ov, "coll_alone_us": coll_alone,
            "coll_overlap_us": coll_ov, "coverage": coverage}


# gemm: compute ratios 1.10 / 1.30 at 4 MiB, 1.40 at 32 MiB; collective ratios 1.5, 1.7, 1.6
# attention: 1.05, collective 1.2; memory: 0.98 (a noisy "speed-up"), no collective time
# one gemm row whose collectives covered half the window (ratio 5.0): left out of the compute factor
HAND = [
    row("gemm", "all_reduce", 4 * MIB, 100.0, 110.0, 10.0, 15.0),
    row("gemm", "all_gather", 4 * MIB, 200.0, 260.0, 20.0, 34.0),
    row("gemm", "all_reduce", 32 * MIB, 50.0, 70.0, 40.0, 64.0, coverage=1.0),
    row("gemm", "p2p", 32 * MIB, 50.0, 250.0, 40.0, None, coverage=0.5),
    row("attention", "reduce_scatter", 4 * MIB, 400.0, 420.0, 10.0, 12.0),
    row("memory", "all_reduce", 4 * MIB, 100.0, 98.0, 10.0, None),
]


def test_fit_gives_the_hand_computed_factors():
    m = itf.fit_interference(HAND, source="hand")
    assert m.compute["gemm"] == pytest.approx(1.30)  # median of 1.10, 1.30, 1.40 (5.0 left out)
    assert m.compute["attention"] == pytest.approx(1.05)
    assert m.compute["memory"] == 1.0  # clamped ...
    assert any("compute memory" in n and "0.9800" in n for n in m.notes)  # ... and said so
    assert any("1 row(s) left out of the compute factors" in n for n in m.notes)
    assert any("without a collective time" in n for n in m.notes)
    assert m.collective["gemm"] == pytest.approx(1.6)  # median of 1.5, 1.7, 1.6
    assert m.collective["attention"] == pytest.approx(1.2)
    assert m.collective["memory"] == 1.0 and any("collective under memory: not measured" in n for n in m.notes)
    assert m.collective["all"] == pytest.approx(1.55)  # median of 1.5, 1.7, 1.6, 1.2
    assert m.rows == 6 and m.source == "hand"
    # per size: 4 MiB median(1.1, 1.3) = 1.2, 32 MiB 1.4; log-size interpolation, constant outside
    assert m.compute_by_size["gemm"] == ((4 * MIB, pytest.approx(1.2)), (32 * MIB, pytest.approx(1.4)))
    assert m.compute_factor("gemm") == pytest.approx(1.30)
    assert m.compute_factor("gemm", 4 * MIB) == pytest.approx(1.2)
    mid = 2 ** ((22 + 25) / 2)  # halfway between 2^22 and 2^25 in log2
    assert m.compute_factor("gemm", mid) == pytest.approx(1.3)
    assert m.compute_factor("gemm", 1024) == pytest.approx(1.2)
    assert m.compute_factor("gemm", 2**40) == pytest.approx(1.4)
    assert m.collective_factor() == pytest.approx(1.55)
    assert m.collective_factor("gemm", 32 * MIB) == pytest.approx(1.6)
    assert m.collective_factor("memory", 4 * MIB) == 1.0
    assert all(math.isfinite(v) and v >= 1.0 for v in (*m.compute.values(), *m.collective.values()))


def test_round_trip_neutral_model_and_kind_checks(tmp_path):
    m = itf.fit_interference(HAND)
    again = itf.InterferenceModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m
    path = itf.save_interference(m, tmp_path / itf.JSON_FILE)
    assert itf.load_interference(path) == m
    assert itf.load_interference(tmp_path) == m  # a folder: its JSON
    none = itf.InterferenceModel.none()
    assert none.is_neutral and not m.is_neutral
    assert all(none.compute_factor(k, 123) == 1.0 and none.collective_factor(k) == 1.0 for k in itf.KINDS)
    with pytest.raises(ConfigError, match="norm"):
        m.compute_factor("norm")
    with pytest.raises(ConfigError):
        m.collective_factor("norm")
    with pytest.raises(TypeError):
        m.compute["gemm"] = 2.0  # type: ignore[index]  # read-only


def test_model_refuses_factors_below_one_or_not_finite():
    good = itf.InterferenceModel.none().to_dict()
    for bad in (0.9, float("nan"), float("inf"), "1.2", True):
        d = json.loads(json.dumps(good))
        d["compute"]["gemm"] = bad
        with pytest.raises(ConfigError, match="compute.gemm"):
            itf.InterferenceModel.from_dict(d, "f.json")
    d = json.loads(json.dumps(good))
    d["compute_by_size"] = {"gemm": [[4, 1.2], [2, 1.1]]}
    with pytest.raises(ConfigError, match="increasing"):
        itf.InterferenceModel.from_dict(d)
    d = json.loads(json.dumps(good))
    del d["collective"]["all"]
    with pytest.raises(ConfigError, match="collective"):
        itf.InterferenceModel.from_dict(d)


def _write_csv(path: Path, rows: list[dict], columns=itf.COLUMNS) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([r.get(c, "") if r.get(c) is not None else "" for c in columns])
    return path


def test_csv_round_trip_and_fit_on_load(tmp_path):
    p = _write_csv(tmp_path / itf.CSV_FILE, HAND)
    rows = itf.read_rows(p)
    assert len(rows) == 6 and rows[3].coll_overlap_us is None and rows[3].coverage == 0.5
    assert itf.load_interference(tmp_path).compute == itf.fit_interference(HAND).compute


@pytest.mark.parametrize("mutate,where,what", [
    (lambda rows, cols: (rows, [c for c in cols if c != "coll_alone_us"]), ":1", "coll_alone_us"),
    (lambda rows, cols: ([{**rows[0], "compute_alone_us": "fast"}], cols), ":2", "compute_alone_us"),
    (lambda rows, cols: ([{**rows[0], "compute_overlap_us": "-3"}], cols), ":2", "compute_overlap_us"),
    (lambda rows, cols: ([{**rows[0], "compute_overlap_us": "nan"}], cols), ":2", "compute_overlap_us"),
    (lambda rows, cols: ([{**rows[0], "compute": "softmax"}], cols), ":2", "compute"),
    (lambda rows, cols: ([{**rows[0], "collective": "broadcast"}], cols), ":2", "collective"),
    (lambda rows, cols: ([{**rows[0], "coll_bytes": "1.5"}], cols), ":2", "coll_bytes"),
    (lambda rows, cols: ([{**rows[0], "compute_alone_us": ""}], cols), ":2", "compute_alone_us"),
])
def test_bad_csv_names_file_line_and_column(tmp_path, mutate, where, what):
    rows, cols = mutate(list(HAND), list(itf.COLUMNS))
    p = _write_csv(tmp_path / "i.csv", rows, cols)
    with pytest.raises(ConfigError) as e:
        itf.load_interference(p)
    assert e.value.field == f"{p}{where}" and what in e.value.message


def test_bad_files_give_config_errors(tmp_path):
    cases = {"missing.csv": None, "empty.csv": "", "short.csv": "compute,collective\n",
             "bad.json": "{not json", "wrong.json": json.dumps({"format": "other"}),
             "list.json": "[1, 2]", "binary.csv": b"\xff\xfe\x00\x81"}
    for name, text in cases.items():
        p = tmp_path / name
        if isinstance(text, bytes):
            p.write_bytes(text)
        elif text is not None:
            p.write_text(text)
        with pytest.raises(ConfigError) as e:
            itf.load_interference(p)
        assert str(p) in e.value.field, (name, e.value)
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match="neither"):
        itf.load_interference(tmp_path / "d")
    with pytest.raises(ConfigError, match="row 1"):
        itf.fit_interference([{"compute": "gemm"}])
    with pytest.raises(ConfigError, match="no measurements"):
        itf.fit_interference([])


def test_import_does_not_pull_torch():
    code = ("import sys, trainsim.calibration.interference; "
            "print(sorted(m for m in ('torch', 'sklearn', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "torch" not in r.stdout


# ---------------------------------------------------------------- the bench


def test_plan_sizes_loops_from_pilot_times():
    p = ib.make_plan(compute_us=1000.0, coll_us=500.0, window_ms=20.0, coverage=1.5)
    assert p.compute_calls == 20 and p.coll_calls == 62 and p.coll_alone_calls == 20  # 1.5 * 20 ms / 0.5 ms + 2
    # a long collective stretches the window to six calls
    p = ib.make_plan(compute_us=1000.0, coll_us=10_000.0, window_ms=20.0, coverage=1.5)
    assert p.compute_calls == 60 and p.coll_calls == 11  # 60 ms window, 1.5 * 6 calls + 2
    # ... but never past the compute-call cap (the row then says "few_completions")
    assert ib.make_plan(compute_us=100.0, coll_us=10_000.0, window_ms=20.0, coverage=1.5).compute_calls \
        == ib.MAX_COMPUTE_CALLS
    # a short collective: the window shrinks so its loop stays under the launch-queue cap
    p = ib.make_plan(compute_us=100.0, coll_us=10.0, window_ms=20.0, coverage=1.5)
    assert p.coll_calls <= ib.MAX_COLL_CALLS and p.coll_calls * 10.0 >= 1.5 * p.compute_calls * 100.0 * 0.99
    assert ib.make_plan(1.0, 1.0, 20.0, 1.5, enqueue_compute_us=10.0, enqueue_coll_us=20.0).spin_ms > 2.0


def test_plan_keys_skip_done_rows():
    computes = {"gemm": [(8, 8, 8)], "memory": [(1,)]}
    keys = ib.plan_keys(computes, ["all_reduce", "p2p"], [4096], done={("gemm", "8x8x8", "p2p", 4096)})
    assert [k.row_id for k in keys] == [("gemm", "8x8x8", "all_reduce", 4096), ("memory", "1MiB", "all_reduce", 4096),
                                        ("memory", "1MiB", "p2p", 4096)]
    assert ib.Key("gemm", (2, 3, 4), "p2p", 1).flops == 48
    assert ib.Key("attention", (1, 2, 8, 4), "p2p", 1).flops == 7 * 2 * 64 * 4


def test_launch_command_and_guard(monkeypatch, tmp_path, capsys):
    cmd = ib.launch_command(4, "o", ["--repeats", "3"], python="python3")
    assert cmd[:4] == ["env", "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"]
    assert cmd[4:] == ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                       "-m", "trainsim.calibration.interference_bench", "--out", "o", "--repeats", "3"]
    with pytest.raises(ConfigError):
        ib.launch_command(1, "o")
    for key, bad in (("NCCL_NVLS_ENABLE", "1"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"),
                     ("NVSHMEM_DISABLE_NVLS", "")):
        for k, v in ib.MULTICAST_OFF.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv(key, bad)
        assert ib.main(["--out", str(tmp_path / "x")]) == 2
        assert key in capsys.readouterr().err
        assert not (tmp_path / "x").exists()


def test_outside_torchrun_exits_2_with_the_launch_line(monkeypatch, tmp_path, capsys):
    for k, v in ib.MULTICAST_OFF.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert ib.main(["--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "torch.distributed.run" in err and "interference_bench" in err and "NCCL_NVLS_ENABLE=0" in err
    assert ib.main(["--out", "x", "--repeats", "0"]) == 2
    assert ib.main(["--out", "x", "--computes", "gemm,softmax"]) == 2
    assert "softmax" in capsys.readouterr().err


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    cmd = ib.launch_command(2, str(out), ["--backend", "gloo", "--gemms", "32x32x32", "--attention", "1x2x16x8",
                                          "--memory-mib", "1", "--sizes", "4096", "--repeats", "1",
                                          "--window-ms", "2", "--warmup", "0", *extra])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def test_gloo_run_writes_one_row_per_key_and_resumes(tmp_path):
    out = tmp_path / "itf"
    proc = _run(out)
    rows = itf.read_rows(out / itf.CSV_FILE)
    keys = {(m.compute, m.compute_shape, m.collective, m.coll_bytes) for m in rows}
    # 3 compute kernels x 4 collectives x 1 size, one row each
    assert len(rows) == 12 and len(keys) == 12
    assert {k[0] for k in keys} == set(itf.KINDS) and {k[2] for k in keys} == set(itf.COLLECTIVES)
    assert {k[1] for k in keys} == {"32x32x32", "1x2x16x8", "1MiB"}
    with (out / itf.CSV_FILE).open(newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(itf.COLUMNS)
    for r in table:
        assert r["gpu"] == "cpu" and r["world"] == "2" and r["repeats"] == "1"
        assert float(r["compute_slowdown"]) == pytest.approx(
            float(r["compute_overlap_us"]) / float(r["compute_alone_us"]), rel=1e-4)
        assert int(r["compute_flops"]) > 0 and int(r["coll_calls"]) >= 4 and int(r["compute_calls"]) >= 3
    meta = json.loads((out / "meta.json").read_text())
    assert meta["backend"] == "gloo" and meta["world"] == 2 and meta["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert "compute slowdown" in proc.stdout and "fitted" in proc.stdout  # the closing table
    model = itf.load_interference(out)  # fits whatever the CPU measured, every factor >= 1
    assert all(v >= 1.0 and math.isfinite(v) for v in model.compute.values())

    before = (out / itf.CSV_FILE).read_bytes()
    _run(out)  # everything present: nothing added
    assert (out / itf.CSV_FILE).read_bytes() == before
    assert "resumed" in json.loads((out / "meta.json").read_text())


def test_a_collective_beyond_the_measured_sizes_is_a_note():
    from types import SimpleNamespace

    from trainsim.sim.costs import _interference_size_note

    im = itf.InterferenceModel(
        {"gemm": 1.1, "attention": 1.05, "memory": 1.1}, {"all": 1.5, "gemm": 1.4, "attention": 1.3, "memory": 2.0},
        compute_by_size={"gemm": ((4 * 2**20, 1.05), (256 * 2**20, 1.25))})
    assert im.measured_sizes() == (4 * 2**20, 256 * 2**20)
    model = SimpleNamespace(name="p", interference=im)
    notes: list[str] = []
    _interference_size_note(model, [32 * 2**20], notes)
    assert notes == []
    _interference_size_note(model, [1024 * 2**20, 32 * 2**20, 2**20], notes)
    assert notes == ["profile 'p': compute-communication interference beside collectives of 1-1,024 MiB is "
                     "priced at the nearest measured size's factors (interference.json measured 4-256 MiB)"]
    _interference_size_note(model, [1024 * 2**20, 1024 * 2**20], notes)  # one size: said once
    assert notes[-1].startswith("profile 'p': compute-communication interference beside a collective of 1,024 MiB "
                                "is priced")
    assert itf.InterferenceModel({"gemm": 1.1, "attention": 1.05, "memory": 1.1},
                                          {"all": 1.5, "gemm": 1.4, "attention": 1.3,
                                           "memory": 2.0}).measured_sizes() is None
