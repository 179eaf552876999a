"""calibration/collectives_bench.py: sizes, groups, the multicast guard, and a real gloo run with resume."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from trainsim.calibration import collectives_bench as cb
from trainsim.calibration.samples import load_sample_dir, read_collectives
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import CollKind

ROOT = Path(__file__).resolve().parents[1]


def test_message_sizes_default_span_and_spacing():
    sizes = cb.message_sizes()
    assert sizes[0] == 2**20 and sizes[-1] == 4 * 2**30 and len(sizes) == 13  # 2^20 .. 2^32
    assert all(b == 2 * a for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    half = cb.message_sizes(2**20, 2**22, per_octave=2)
    assert half == [2**20, 1482910, 2**21, 2965820, 2**22]  # round(2^20 * sqrt2 / 2) * 2
    assert all(s % 2 == 0 for s in half)
    with pytest.raises(ConfigError):
        cb.message_sizes(2**22, 2**20)


@pytest.mark.parametrize("world,want", [(2, [2]), (4, [2, 4]), (8, [2, 4, 8]), (6, [2, 6]), (3, [3])])
def test_group_sizes(world, want):
    assert cb.group_sizes(world) == want


def test_plan_skips_complete_and_resumes_partial_work():
    done = Counter({("all_reduce", 512, 1, 2): 3, ("all_reduce", 1024, 1, 2): 1})
    tasks = cb.plan([CollKind.ALL_REDUCE, CollKind.P2P], [1024, 2048], [2, 4], iters=3, done=done)
    keys = [(t.kind, t.entries, t.group, t.start_iteration) for t in tasks]
    assert keys == [(CollKind.ALL_REDUCE, 1024, 2, 1), (CollKind.ALL_REDUCE, 512, 4, 0),
                    (CollKind.ALL_REDUCE, 1024, 4, 0), (CollKind.P2P, 512, 2, 0), (CollKind.P2P, 1024, 2, 0)]


def test_multicast_guard_sets_defaults_and_refuses_overrides():
    env: dict[str, str] = {}
    cb.ensure_multicast_off(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    for key, bad in (("NCCL_NVLS_ENABLE", "1"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"),
                     ("NVSHMEM_DISABLE_NVLS", "")):
        with pytest.raises(ConfigError, match=key):
            cb.ensure_multicast_off({key: bad})


def test_launch_command_carries_the_env():
    cmd = cb.launch_command(8, "out", ["--iters", "5"], python="python3")
    assert cmd[:4] == ["env", "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"]
    assert cmd[4:] == ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "8",
                       "-m", "trainsim.calibration.collectives_bench", "--out", "out", "--iters", "5"]
    with pytest.raises(ConfigError):
        cb.launch_command(1, "out")


def test_main_refuses_multicast_before_touching_torch(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "1")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    assert cb.main(["--out", str(tmp_path / "x")]) == 2
    assert "NCCL_NVLS_ENABLE" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _run(out: Path, *extra: str) -> None:
    pytest.importorskip("torch")
    cmd = cb.launch_command(2, str(out), ["--backend", "gloo", "--warmup", "1", *extra])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_gloo_run_writes_per_iteration_rows_and_resumes(tmp_path):
    out = tmp_path / "coll"
    _run(out, "--sizes", "1024,4096", "--iters", "3")
    samples = load_sample_dir(out)
    assert samples.meta["backend"] == "gloo" and samples.meta["world"] == 2
    assert samples.meta["env"]["NCCL_NVLS_ENABLE"] == "0"
    rows = samples.collectives
    keys = Counter((s.coll.kind, s.coll.entries, s.coll.nodes, s.coll.gpus_per_node) for s in rows)
    # 4 collectives x 2 sizes, one group (2) on a world of 2, 3 timed iterations each
    assert len(keys) == 8 and set(keys.values()) == {3}
    assert {k[1] for k in keys} == {512, 2048}  # entries = bytes / 2
    assert all(k[2:] == (1, 2) for k in keys)
    iters = {}
    for s in rows:
        iters.setdefault((s.coll.kind, s.coll.entries), []).append(s.iteration)
    assert all(v == [0, 1, 2] for v in iters.values())
    assert all(s.duration_us > 0 for s in rows)

    before = (out / "collectives.csv").read_bytes()
    _run(out, "--sizes", "1024,4096", "--iters", "3")  # everything complete: nothing added
    assert (out / "collectives.csv").read_bytes() == before

    _run(out, "--sizes", "1024,8192", "--iters", "4", "--collectives", "all_reduce,p2p")
    rows2 = read_collectives(out / "collectives.csv")
    assert rows2[:len(rows)] == list(rows)  # appended, never rewritten
    new = rows2[len(rows):]
    got = Counter((s.coll.kind, s.coll.entries, s.iteration) for s in new)
    want = Counter({(CollKind.ALL_REDUCE, 512, 3): 1, (CollKind.P2P, 512, 3): 1,
                    **{(k, 4096, i): 1 for k in (CollKind.ALL_REDUCE, CollKind.P2P) for i in range(4)}})
    assert got == want
