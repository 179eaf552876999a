"""The slowest rank's host lag: its order statistics, its measurement from the probe's marks, the
profile's table of it, and how a tensor-parallel step charges it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainsim.calibration.rank_spread import (
    RANK_LAG_FILE,
    fit_rank_sigma,
    load_rank_lag,
    main,
    read_rank_spread,
    with_rank_lag,
)
from trainsim.operators import ConfigError, ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.stages import expected_max_normal, meeting_ranks, slowest_rank_factor
from trainsim.sim.host_time import host_fields, issues_ahead


@pytest.mark.parametrize(("n", "expected"), [
    (1, 0.0), (2, 1 / math.sqrt(math.pi)), (3, 1.5 / math.sqrt(math.pi)),  # closed forms
    (4, 1.0293753730), (8, 1.4236003060)])  # tabulated order statistics of the normal
def test_the_expected_maximum_of_standard_normals(n, expected):
    assert expected_max_normal(n) == pytest.approx(expected, abs=1e-9)


def test_no_expected_maximum_of_no_normals():
    with pytest.raises(ValueError, match="n must be >= 1"):
        expected_max_normal(0)


def test_the_lag_is_the_measured_one_where_measured_else_a_normal_spread():
    measured = {2: 1.07, 4: 1.22}
    assert slowest_rank_factor(1, 0.2, measured) == 1.0
    assert slowest_rank_factor(4, 0.2, measured) == 1.22
    assert slowest_rank_factor(8, 0.2, measured) == pytest.approx(1 + 0.2 * 1.4236003060)
    assert slowest_rank_factor(2, 0.0) == 1.0
    with pytest.raises(ValueError, match="sigma"):
        slowest_rank_factor(2, -0.1)


@pytest.mark.parametrize(("runtime", "tp", "ranks"), [
    ("dtensor_tp", 4, 4), ("fsdp2_tp", 2, 2), ("dtensor_tp_pp", 2, 2), ("dtensor_tp_pp", 4, 4),
    ("eager", 1, 1), ("fsdp2", 1, 1), ("eager_pp", 1, 1), ("megatron_eager_tp", 4, 1), (None, 2, 1)])
def test_only_tensor_parallel_runtimes_wait_for_their_slowest_rank(runtime, tp, ranks):
    # a TP group meets inside every layer; a pipeline's stages issue ahead and do not wait for each
    # other's hosts, so under the pipelining runtime only each stage's TP group counts
    assert meeting_ranks(runtime, tp) == ranks


def _lines(layout: str, name: str, secs_by_rank: dict[int, list[float]]) -> list[dict]:
    """Probe lines of one iteration: rank r's micro-batch i takes secs_by_rank[r][i] ms from its first
    layer to its forward's end, after 5 ms before the first layer (the synchronisation, not counted)."""
    ms = 1_000_000
    out = []
    for rank, secs in secs_by_rank.items():
        marks = []
        for mb, d in enumerate(secs):
            t0 = mb * 100 * ms
            marks += [["F", mb, -1, t0], ["L", mb, 0, t0 + 5 * ms], ["E", mb, -1, t0 + 5 * ms + int(d * ms)]]
        out.append({"layout": layout, "name": name, "rank": rank, "iter": 0, "wall_s": 0.1, "marks": marks})
    return out


def _write(path, lines: list[dict]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_the_lag_per_number_of_ranks_by_hand(tmp_path):
    # tp2: micro-batches of 10 and 10 ms on rank 0, 12 and 14 on rank 1: lags 12/11 and 14/12; a GPU-bound
    # shape (its forward waits for the GPU) lags 2x and is left out, and so are other layouts' lines (dp2's
    # ranks do not meet inside a micro-batch). tp4: every micro-batch 10, 10, 10, 14.
    two = _lines("tp2", "host-L1-m2", {0: [10, 10], 1: [12, 14]}) + _lines("tp2", "g4096-L6", {0: [10], 1: [30]})
    two += _lines("dp2", "host-L1-m2", {0: [10, 10], 1: [30, 30]}) + _lines("fsdp2", "host-L1-m2", {0: [10], 1: [30]})
    four = _lines("tp4", "host-L1-m2", {0: [10, 10], 1: [10, 10], 2: [10, 10], 3: [14, 14]})
    lag = read_rank_spread([_write(tmp_path / "a.jsonl", two), _write(tmp_path / "b.jsonl", four)])
    assert lag == {2: pytest.approx((12 / 11 + 14 / 12) / 2), 4: pytest.approx(14 / 11)}


def test_sigma_is_the_least_squares_normal_spread_of_the_lags():
    e2, e4 = expected_max_normal(2), expected_max_normal(4)
    assert fit_rank_sigma({2: 1 + 0.15 * e2, 4: 1 + 0.15 * e4}) == pytest.approx(0.15)
    # two points off the line: (e2 * 0.1 + e4 * 0.2) / (e2^2 + e4^2)
    assert fit_rank_sigma({2: 1.1, 4: 1.2}) == pytest.approx((e2 * 0.1 + e4 * 0.2) / (e2 * e2 + e4 * e4))
    with pytest.raises(ConfigError, match="no spread above 0"):
        fit_rank_sigma({2: 1.0})


def test_a_file_without_tiny_shapes_on_several_ranks_or_not_the_probes_is_named(tmp_path):
    one = _write(tmp_path / "one.jsonl", _lines("1gpu", "host-L1-m2", {0: [10, 11]}))
    with pytest.raises(ConfigError, match="one.jsonl: no host-"):
        read_rank_spread([one])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(ConfigError, match="bad.jsonl: not validation/probe_tp_host_pace.py output"):
        read_rank_spread([str(bad)])


def test_the_command_writes_a_table_that_loads_and_a_bad_input_writes_nothing(tmp_path, capsys):
    src = _write(tmp_path / "p.jsonl", _lines("tp2", "host-L1-m2", {0: [10, 10], 1: [11, 11]}))
    out = tmp_path / RANK_LAG_FILE
    assert main([src, "--out", str(out)]) == 0
    lag, sigma = load_rank_lag(out)
    assert lag == {2: pytest.approx(11 / 10.5)} and sigma == pytest.approx((11 / 10.5 - 1) / expected_max_normal(2))
    assert "2 ranks: the slowest host x1.048" in capsys.readouterr().out
    none = tmp_path / "none.json"
    assert main([_write(tmp_path / "q.jsonl", []), "--out", str(none)]) == 2
    assert not none.exists() and "q.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["{", '{"lag": {"1": 1.1}, "sigma": 0.1}', '{"lag": {"2": 5}, "sigma": 0.1}',
                                 '{"lag": {"2": 1.1}, "sigma": -1}', '{"lag": {"2": 1.1}}', '{"lag": [], "sigma": 0}'])
def test_a_bad_rank_lag_table_names_its_file(tmp_path, bad):
    p = tmp_path / RANK_LAG_FILE
    p.write_text(bad)
    with pytest.raises(ConfigError, match=RANK_LAG_FILE):
        load_rank_lag(p)


def test_only_the_rendezvous_runtimes_carry_the_lag():
    table = {"dtensor_tp": {"per_layer_s": 0.009}, "eager": {"per_layer_s": 0.002}}
    out = with_rank_lag(table, {2: 1.07}, 0.19)
    assert out["dtensor_tp"] == {"per_layer_s": 0.009, "rank_lag": {2: 1.07}, "rank_sigma": 0.19}
    assert out["eager"] == {"per_layer_s": 0.002} and "rank_lag" not in table["dtensor_tp"]


class _Profile:
    name = "p"

    def __init__(self, lag: dict[int, float] | None) -> None:
        tp = {"per_layer_s": 0.003, "per_iteration_s": 0.0, "overlap": "overlapped"}
        self.host_overhead = {"dtensor_tp": tp, "eager": {**tp}}
        if lag is not None:
            self.host_overhead = with_rank_lag(self.host_overhead, lag, 0.2)


def _plan(mp: int):
    model = ModelSpec("m", hidden=256, heads=8, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=2, precision="bf16", recompute="none", framework="hf", zero_stage=0)
    return build_stage_plans(model, tr, Parallelism(mp=mp))[0]


@pytest.mark.parametrize(("mp", "lag"), [(2, 1.07), (4, 1.22), (8, 1 + 0.2 * 1.4236003060)])
def test_a_tensor_parallel_step_waits_for_the_slowest_rank_s_host(mp, lag):
    # host-bound: 4 layers x 3 ms a micro-batch against 1.5 ms of GPU work; measured lags for 2 and 4 ranks,
    # the normal spread for 8 (said so in the note)
    args = (0.0005, 0.001, 0.0, 0.0, 0.001)
    plain, notes = host_fields(_Profile(None), _plan(mp), *args, notes=[], par=Parallelism(mp=mp)), []
    lagged = host_fields(_Profile({2: 1.07, 4: 1.22}), _plan(mp), *args, notes=notes, par=Parallelism(mp=mp))
    for k in ("host_fwd_s", "host_bwd_s"):
        assert lagged[k] == pytest.approx(plain[k] * lag)
    assert lagged["host_update_s"] == plain["host_update_s"]
    (note,) = [n for n in notes if "slowest of their hosts" in n]
    assert f"{mp} ranks meet inside every layer" in note and f"x{lag:.3f}" in note
    assert ("not measured for 8 ranks" in note) == (mp == 8)
    assert not any("ran slower than predicted" in n for n in notes)


def test_one_gpu_and_a_profile_without_a_lag_are_unchanged():
    args = (0.0005, 0.001, 0.0, 0.0, 0.001)
    eager = host_fields(_Profile({2: 1.07}), _plan(1), *args, notes=[], par=Parallelism())
    assert eager == host_fields(_Profile(None), _plan(1), *args, notes=[], par=Parallelism())


def test_the_h200_profile_carries_its_hosts_lag_and_the_h100_profile_none():
    from trainsim.calibration.profile import load_profile

    h200, h100 = load_profile("h200-sxm-bf16"), load_profile("h100-sxm-bf16")
    assert set(h200.host_overhead["dtensor_tp"]["rank_lag"]) == {2, 4}
    assert 1.0 < h200.host_overhead["dtensor_tp"]["rank_lag"][2] < h200.host_overhead["dtensor_tp"]["rank_lag"][4]
    assert "rank_lag" not in h200.host_overhead["eager"]
    assert not any("rank_lag" in e for e in h100.host_overhead.values())


def test_the_shipped_rank_lag_is_what_its_command_writes(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)  # the table names its sources relative to the repository, where its command runs
    out = tmp_path / RANK_LAG_FILE
    assert main(["validation/tp_host_pace_h200_2gpu_machineBB/tp_host_pace.jsonl",
                 "validation/rank_lag_h200_2gpu_machineBN/tp_host_pace.jsonl",
                 "validation/rank_lag_layouts_h200_2gpu_machineBR/tp_host_pace.jsonl",
                 "validation/tp_host_pace_h200_4gpu_machineBI/tp_host_pace.jsonl", "--out", str(out)]) == 0
    assert out.read_bytes() == (repo / "calibration" / "profiles" / "h200-sxm-bf16" / RANK_LAG_FILE).read_bytes()


def test_a_tensor_parallel_pipeline_stage_waits_for_its_own_tp_ranks_only():
    # pp2 x tp2: the stage's two TP ranks meet inside every layer; the stages' hosts issue ahead and do
    # not wait for each other (the GPUs hand the micro-batches on), so two ranks, not four
    model = ModelSpec("m", hidden=256, heads=8, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=4, precision="bf16", recompute="none", framework="hf", zero_stage=0)
    plan = build_stage_plans(model, tr, Parallelism(pp=2, mp=2))[0]
    assert plan.runtime == "dtensor_tp_pp"
    args = (0.0005, 0.001, 0.0, 0.0, 0.001)  # the profile's dtensor_tp line prices the stages (a note says so)
    alone, notes = host_fields(_Profile(None), plan, *args, notes=[], par=Parallelism(pp=2, mp=2)), []
    piped = host_fields(_Profile({2: 1.07, 4: 1.22}), plan, *args, notes=notes, par=Parallelism(pp=2, mp=2))
    assert piped["host_fwd_s"] == pytest.approx(alone["host_fwd_s"] * 1.07)
    assert issues_ahead(plan)  # the simulation runs the stage's host clock
    assert not issues_ahead(build_stage_plans(model, tr, Parallelism(mp=2))[0])
    assert any("2 ranks meet inside every layer, so" in n for n in notes)
