"""`trainsim sweep` at scale (issue 14, item 4): micro-batch and schedule axes, the closed-form lower
bound (sim.bound) that prunes branch-and-bound style, parallel workers and Dask, bad input."""

from __future__ import annotations

import json
import sys

import pytest

import trainsim
from trainsim.scenarios.cli import main
from trainsim.scenarios.sweep import candidates, parse_schedules, sweep_layouts
from trainsim.sim.bound import lower_bound

SCHEDULES = parse_schedules(["1f1b", "gpipe", "interleaved-1f1b:2"])

# (scenario, overrides, sweep axes): every feature the bound's argument covers
BOUND_CASES = [
    ("gpt20b-dgxh100", [], dict(pps=[1, 2, 4, 8], mps=[2, 4, 8], sps=[False, True], micro_batches=[1, 4],
                                schedules=SCHEDULES)),
    ("gpt20b-dgxh100", ["simulation.mode=ideal"], dict(pps=[2, 4], mps=[4, 8], schedules=SCHEDULES)),
    ("gpt20b-dgxh100", ["training.overlap_grad_reduce=true", "parallelism.tp_comm_overlap=true",
                        "parallelism.sequence_parallel=true"], dict(pps=[1, 2, 4], mps=[2, 4, 8])),
    ("llama3-70b-dgxh100", [], dict(pps=[2, 4, 8], mps=[4, 8], cps=[1, 2], sps=[True],
                                    schedules=parse_schedules(["1f1b", "interleaved-1f1b:5"]))),
    ("llama3-8b-dgxh100", [], dict(pps=[1, 2], mps=[1, 2, 4], cps=[1, 2])),
    ("llama3-8b-dgxh100", ["training.zero_stage=3", "training.distributed_optimizer=false"], dict(pps=[1, 2],
                                                                                                   mps=[1, 2])),
    ("gptneox-h100", ["cluster.preset=dgx-h100", "parallelism.dp=8", "training.micro_batches=8",
                      "training.zero_stage=3"], dict(pps=[1, 2], mps=[1, 2])),
    ("gptneox-h100", ["cluster.preset=dgx-h100", "parallelism.dp=8", "training.micro_batches=8"],
     dict(pps=[1, 2], mps=[1, 2])),
    # host-bound pipelines (the tiny host shapes): the stages' hosts issue ahead on their own clocks
    ("gptneox-h100", ["cluster.preset=hgx-h100", "cluster.gpus_per_node=1", "simulation.mode=realistic",
                      "model.hidden=256", "model.heads=4",
                      "model.seq_len=128", "training.micro_batch=1", "training.micro_batches=8"],
     dict(pps=[1, 2, 4], mps=[1, 2])),
]


def _load(name, overrides):
    if not name.startswith("gptneox"):
        overrides = [*overrides, "profile.name=roofline"]
    return trainsim.load_scenario(name, overrides)


@pytest.mark.parametrize("name,overrides,axes", BOUND_CASES)
def test_the_bound_never_exceeds_the_simulation(name, overrides, axes):
    res = sweep_layouts(_load(name, overrides), top=None, **axes)
    simulated = [r for r in res.rows if r.simulated]
    assert simulated, "nothing simulated: the case tests nothing"
    for r in simulated:
        assert 0 < r.bound_s <= r.simulated_s, (r.name, r.bound_s, r.simulated_s)
    # not vacuous: the bound is within a few per cent of the simulation somewhere
    assert max(r.bound_s / r.simulated_s for r in simulated) > 0.9


def test_the_bound_is_below_the_whole_simulation_of_the_16k_case_and_above_its_compute():
    from trainsim.scenarios.compose import predict, simulate_prediction

    pred = predict(trainsim.load_scenario("gpt175b-dgxh100-16k"))
    b = lower_bound(pred.costs, overlap_dp=False)
    compute = max(pred.costs.micro_batches * (s.fwd_compute_s + s.bwd_compute_s) for s in pred.costs.stages)
    assert compute < b <= simulate_prediction(pred).iteration_s
    # the default counts only the last bucket after the backward: never above the exact variant
    assert lower_bound(pred.costs) <= b


def test_pruning_by_the_bound_keeps_the_top_k_of_an_unpruned_sweep():
    sc = _load("gpt20b-dgxh100", [])
    axes = dict(pps=[1, 2, 4, 8], mps=[2, 4, 8], sps=[False, True], micro_batches=[1, 2, 4], schedules=SCHEDULES)
    full = sweep_layouts(sc, top=None, **axes)
    for k in (1, 5):
        pruned = sweep_layouts(sc, top=k, **axes)
        assert pruned.pruned_bound > 0, "the case must prune something to test it"
        assert [(r.name, r.simulated_s) for r in pruned.rows[:k]] == [(r.name, r.simulated_s) for r in full.rows[:k]]
        kth = pruned.rows[k - 1].simulated_s
        for r in pruned.rows:
            assert r.pruned in (None, "bound", "memory")
            if r.pruned == "bound":
                assert r.bound_s > kth and r.fits_memory and not r.simulated
        assert pruned.simulated + pruned.pruned_bound + pruned.pruned_memory == len(pruned.rows) == len(full.rows)
        assert pruned.pruned_memory == full.pruned_memory


def _sweep_json(capsys, *extra):
    argv = ["sweep", "gpt20b-dgxh100", "--set", "profile.name=roofline", "--sp", "both", "--micro-batch", "2,4",
            "--schedule", "1f1b,interleaved-1f1b", "--top", "3", "--json", "-q", *extra]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_jobs_do_not_change_a_bit(capsys):
    one = _sweep_json(capsys, "--jobs", "1")
    two = _sweep_json(capsys, "--jobs", "2")
    assert one == two
    out = json.loads(one)
    assert out["simulated"] > 3 and out["pruned"]["bound"] > 0
    rows = out["layouts"]
    assert len(rows) == 3 and all(r["simulated"] and r["pruned"] is None for r in rows)
    assert {r["micro_batch"] for r in out["layouts"]} <= {2, 4}
    for r in rows:  # the global batch is kept: m follows b and dp
        assert r["micro_batch"] * r["micro_batches"] * r["dp"] == out["global_batch"] == 256


def test_dask_gives_the_same_answer(capsys):
    pytest.importorskip("distributed")
    assert _sweep_json(capsys, "--jobs", "2", "--dask", "local") == _sweep_json(capsys)


def test_text_output_says_the_top_layouts_were_simulated_in_full(capsys):
    assert main(["sweep", "gpt20b-dgxh100", "--set", "profile.name=roofline", "--micro-batch", "1,4",
                 "--schedule", "1f1b,gpipe", "--top", "4", "-q"]) == 0
    out = capsys.readouterr().out
    assert "the 4 shown: 4 simulated in full" in out
    assert "by memory" in out and "by the lower bound" in out


def test_candidates_keep_the_global_batch_and_name_the_swept_axes():
    sc = _load("gpt20b-dgxh100", [])
    cands = candidates(sc, pps=[4], mps=[8], micro_batches=[1, 2], schedules=parse_schedules(["1f1b", "gpipe"]))
    assert [c.name for c in cands] == ["4-8-4 b=1 1f1b", "4-8-4 b=1 gpipe", "4-8-4 b=2 1f1b", "4-8-4 b=2 gpipe"]
    assert [c.micro_batches for c in cands] == [64, 64, 32, 32]
    assert candidates(sc, pps=[4], mps=[8])[0].name == "4-8-4"  # axes not swept stay out of the name


def test_a_one_stage_layout_is_swept_once_whatever_the_schedules():
    sc = _load("gpt20b-dgxh100", [])
    cands = candidates(sc, pps=[1, 2], mps=[2], schedules=parse_schedules(["interleaved-1f1b:2", "gpipe", "1f1b"]))
    one = [c for c in cands if c.pp == 1]
    assert [(c.name, c.schedule.value) for c in one] == [("1-2-64 gpipe", "gpipe")]  # the interleaved one needs pp > 1
    assert sorted(c.schedule.value for c in cands if c.pp == 2) == ["1f1b", "gpipe", "interleaved-1f1b"]
    only_interleaved = candidates(sc, pps=[1], mps=[2], schedules=parse_schedules(["interleaved-1f1b:2"]))
    assert len(only_interleaved) == 1  # kept, and skipped with its reason if the framework cannot take it


def test_an_interleaved_schedule_that_the_layout_cannot_run_is_skipped_with_its_reason():
    sc = _load("gpt20b-dgxh100", [])
    # b = 32 at dp 4 leaves m = 2 micro-batches for 4 stages
    res = sweep_layouts(sc, pps=[4], mps=[8], micro_batches=[32], schedules=parse_schedules(["interleaved-1f1b:2"]))
    assert not res.rows and "multiple of pp" in res.skipped[0].reason


@pytest.mark.parametrize("argv,needle", [
    (["--micro-batch", "3"], "--micro-batch"),  # 3 does not divide the global batch of 256
    (["--micro-batch", "0"], "--micro-batch"),
    (["--micro-batch", "x"], "--micro-batch"),
    (["--schedule", "zigzag"], "--schedule"),
    (["--schedule", "1f1b:2"], "--schedule"),
    (["--schedule", "interleaved-1f1b:1"], "--schedule"),
    (["--jobs", "0"], "--jobs"),
    (["--dask", " "], "--dask"),
])
def test_bad_sweep_input_is_one_line_naming_the_flag_exit_2(capsys, argv, needle):
    rc = main(["sweep", "gpt20b-dgxh100", "--set", "profile.name=roofline", "-q", *argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("trainsim: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err, err


def test_dask_requested_but_missing_is_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    rc = main(["sweep", "gpt20b-dgxh100", "--set", "profile.name=roofline", "-q", "--dask", "local"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--dask" in err and "trainsim[dask]" in err, err


def test_the_131k_gpu_scenario_is_bundled_as_a_real_plan():
    sc = trainsim.load_scenario("gpt175b-dgxh100-128k")
    par = sc.parallelism
    assert sc.gpus == 131_072 and (par.pp, par.mp, par.dp) == (16, 8, 1024)
    tokens = sc.training.micro_batch * sc.training.micro_batches * par.dp * sc.model.seq_len
    assert 8e6 <= tokens <= 64e6  # the global batch of today's largest runs, not a toy
