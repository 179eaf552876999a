"""The runtimes' host cost: its fit from tiny-shape rows, its table, and how a step charges it."""

from __future__ import annotations

import dataclasses

import pytest

from trainsim.calibration.host_overhead import (
    fit_host_overhead,
    load_host_overhead,
    main,
    parse_head_tail_arg,
    read_head_tail,
    read_rows,
    row_runtime,
    runtime_of,
)
from trainsim.operators import ConfigError, ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.sim.host_time import host_fields


def _row(layout: str, layers: int, m: int, s: float) -> dict[str, str]:
    return {"layout": layout, "layers": str(layers), "micro_batches": str(m), "min_s": str(s), "device": "GPU"}


@pytest.mark.parametrize(("layout", "runtime"), [("1gpu", "eager"), ("dp2", "ddp"), ("tp4", "dtensor_tp"),
                                                 ("fsdp2", "fsdp2"), ("fsdp2xtp2", "fsdp2_tp"), ("pp2", "eager_pp"),
                                                 ("pp2xtp2", "dtensor_tp_pp"), ("pp2xfsdp2", None)])
def test_runtime_of_a_layout(layout, runtime):
    assert runtime_of(layout) == runtime


def test_fit_recovers_a_line_and_refits_a_negative_intercept_through_the_origin():
    # 2 ms per layer and micro-batch, 5 ms per iteration; eager rows 1 ms, -1 ms intercept
    rows = [_row("tp2", L, m, 0.005 + 0.002 * L * m) for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    rows += [_row("1gpu", L, 4, -0.001 + 0.001 * L * 4) for L in (4, 8)]
    rows += [_row("pp2xfsdp2", 4, 4, 9.0)]  # FSDP inside a pipeline: no runtime of this table
    t = fit_host_overhead(rows)
    assert set(t) == {"dtensor_tp", "eager"}
    assert t["dtensor_tp"]["per_layer_s"] == pytest.approx(0.002)
    assert t["dtensor_tp"]["per_iteration_s"] == pytest.approx(0.005)
    assert t["eager"]["per_iteration_s"] == 0.0 and t["eager"]["fitted_intercept_s"] == pytest.approx(-0.001)
    # least squares with the intercept held at 0 over x = 16, 32 layer-steps, y = 15, 31 ms:
    # (16 * 15 + 32 * 31) / (16^2 + 32^2) = 1232 / 1280 ms; keeping the free slope (1 ms) would put
    # every prediction 1 ms above the fitted line
    assert t["eager"]["per_layer_s"] == pytest.approx(1.232 / 1280, rel=1e-9)
    assert t["eager"]["rows"] == 2 and t["eager"]["overlap"] == "overlapped"


def test_fit_refuses_one_size_only():
    with pytest.raises(ConfigError, match="dtensor_tp"):
        fit_host_overhead([_row("tp2", 4, 4, 0.1), _row("tp2", 4, 4, 0.11)])


def test_the_command_writes_a_table_that_loads(tmp_path):
    src = tmp_path / "rows.csv"
    lines = ["layout,layers,micro_batches,min_s,device"] + [f"tp2,{L},{m},{0.001 * L * m + 0.01},GPU"
                                                             for L, m in ((2, 2), (4, 2), (2, 4))]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "host.json"
    assert main([str(src), "--out", str(out)]) == 0
    table = load_host_overhead(out)
    assert table["dtensor_tp"]["per_layer_s"] == pytest.approx(0.001)


@pytest.mark.parametrize("bad", ["{", '{"runtimes": {"nope": {}}}',
                                 '{"runtimes": {"eager": {"overlap": "overlapped", "per_layer_s": -1, '
                                 '"per_iteration_s": 0}}}'])
def test_a_bad_table_names_its_file(tmp_path, bad):
    p = tmp_path / "host_overhead.json"
    p.write_text(bad)
    with pytest.raises(ConfigError, match="host_overhead.json"):
        load_host_overhead(p)


class _Profile:
    name = "p"

    def __init__(self, overlap: str) -> None:
        self.host_overhead = {"dtensor_tp": {"per_layer_s": 0.003, "per_iteration_s": 0.010, "overlap": overlap},
                              "eager": {"per_layer_s": 0.001, "per_iteration_s": 0.0, "overlap": overlap}}


def _plan(mp: int):
    model = ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=2, precision="bf16", recompute="none", framework="hf", zero_stage=0)
    return build_stage_plans(model, tr, Parallelism(mp=mp))[0]


def test_overlapped_host_adds_only_its_excess_over_the_gpu():
    plan = _plan(2)  # dtensor_tp: 4 layers x 3 ms = 12 ms per micro-batch, split 1:2 like the GPU work
    f = host_fields(_Profile("overlapped"), plan, fwd_s=0.002, bwd_s=0.004, mp_fwd=0.001, mp_bwd=0.0,
                     update_s=0.004, notes=[])
    assert f["host_fwd_s"] == pytest.approx(0.004) and f["host_bwd_s"] == pytest.approx(0.008)
    assert f["host_fwd_extra_s"] == pytest.approx(0.004 - 0.003)
    assert f["host_bwd_extra_s"] == pytest.approx(0.008 - 0.004)
    assert f["host_update_s"] == pytest.approx(0.010 - 0.004)
    serial = host_fields(_Profile("serial"), plan, 0.002, 0.004, 0.001, 0.0, 0.004, [])
    assert serial["host_fwd_extra_s"] == pytest.approx(0.004) and serial["host_update_s"] == pytest.approx(0.010)


def test_gpu_bound_steps_get_no_host_time():
    eager = host_fields(_Profile("overlapped"), _plan(1), 0.010, 0.020, 0.0, 0.0, 0.005, [])
    assert eager["host_fwd_extra_s"] == 0.0 and eager["host_bwd_extra_s"] == 0.0


@pytest.mark.parametrize(("kernels", "mp", "pp", "runtime"), [
    ("eager", 1, 1, "megatron_eager"), ("eager", 2, 1, "megatron_eager_tp"), ("eager", 1, 2, "megatron_eager_pp"),
    ("eager", 4, 2, "megatron_eager_tp_pp"), ("fused", 2, 1, None)])
def test_megatron_plans_in_eager_ops_name_their_runtime_and_fused_kernels_none(kernels, mp, pp, runtime):
    # train_3d.py measured the eager layer's host; Transformer Engine's fused one was not measured
    model = ModelSpec("m", hidden=256, heads=4, layers=8, seq_len=128)
    tr = TrainingSpec(precision="bf16", kernels=kernels)
    plans = build_stage_plans(model, tr, Parallelism(mp=mp, pp=pp))
    assert {p.runtime for p in plans} == {runtime}
    if runtime is None:
        assert host_fields(_Profile("overlapped"), plans[0], 0.01, 0.02, 0.0, 0.0, 0.0, []) == {}


def test_a_train_3d_row_runs_the_megatron_runtime_along_its_longest_stage():
    row = {"layout": "pp2-mp2-dp1", "pp": "2", "mp": "2", "dp": "1", "layers": "16", "micro_batches": "8"}
    # the encoder split gives the stages 9 and 7 layers; the hosts issue ahead, so the host's critical
    # path is the longer stage's m steps (not the m + pp - 1 of the GPUs' slot chart)
    assert row_runtime(row) == ("megatron_eager_tp_pp", 9 * 8)
    assert row_runtime({**row, "layout": "pp1-mp1-dp2", "pp": "1", "mp": "1"}) == ("megatron_eager", 16 * 8)
    assert row_runtime(_row("tp2", 4, 2, 0.1)) == ("dtensor_tp", 8)


def test_machines_sharing_no_runtime_are_normalised_apart():
    # train_hf_parallel.py rows on machines A (0.8x) and B (1.25x); train_3d.py rows on machine Z
    # only: adding Z's runtime leaves the others' lines and factors as they were, Z's factor is 1
    def line(L: int, m: int) -> float:
        return 0.020 + 0.003 * L * m

    hf = [{**_row("tp2", L, m, 0.8 * line(L, m)), "lease": "A"} for L, m in ((4, 4), (8, 4), (4, 8))]
    hf += [{**_row("tp4", L, m, 1.25 * line(L, m)), "lease": "B"} for L, m in ((4, 4), (8, 8))]
    t3d = [{"layout": "pp1-mp1-dp1", "pp": "1", "mp": "1", "dp": "1", "layers": str(L), "micro_batches": str(m),
            "min_s": str(0.004 + 0.0011 * L * m), "device": "GPU", "lease": "Z"} for L, m in ((4, 2), (16, 8))]
    alone, both = fit_host_overhead(hf), fit_host_overhead(hf + t3d)
    assert both["dtensor_tp"] == alone["dtensor_tp"]
    assert both["dtensor_tp"]["lease_factors"] == pytest.approx({"A": 0.8, "B": 1.25}, rel=1e-6)
    assert both["megatron_eager"]["lease_factors"] == {"Z": 1.0}
    assert both["megatron_eager"]["per_layer_s"] == pytest.approx(0.0011, rel=1e-9)
    assert both["megatron_eager"]["overlap"] == "ahead"


def test_a_table_without_a_lease_column_is_the_machine_of_its_file(tmp_path):
    d = tmp_path / "machineZ"
    d.mkdir()
    src = d / "tiny.csv"
    src.write_text("layout,pp,mp,dp,layers,micro_batches,min_s,device\n"
                   "pp1-mp2-dp1,1,2,1,4,2,0.025,GPU\npp1-mp2-dp1,1,2,1,16,8,0.330,GPU\n")
    (rows,) = [read_rows([str(src)])]
    assert {r["lease"] for r in rows} == {"machineZ/tiny"}
    assert fit_host_overhead(rows)["megatron_eager_tp"]["lease_factors"] == {"machineZ/tiny": 1.0}


def test_a_host_running_ahead_pays_only_its_excess_over_a_whole_micro_batch():
    # megatron_eager: 4 layers x 3 ms = 12 ms of host per micro-batch, split like the GPU compute
    prof = _Profile("ahead")
    prof.host_overhead = {"megatron_eager": {"per_layer_s": 0.003, "per_iteration_s": 0.0, "overlap": "ahead"}}
    plan = build_stage_plans(ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128),
                             TrainingSpec(precision="bf16", kernels="eager"), Parallelism())[0]
    # GPU 3 + 1 (MP) + 9 = 13 ms against the host's 12: nothing shows
    balanced = host_fields(prof, plan, fwd_s=0.003, bwd_s=0.009, mp_fwd=0.001, mp_bwd=0.0, update_s=0.0, notes=[])
    assert balanced["host_fwd_s"] == pytest.approx(0.003) and balanced["host_bwd_s"] == pytest.approx(0.009)
    assert balanced["host_fwd_extra_s"] == 0.0 and balanced["host_bwd_extra_s"] == 0.0
    # GPU 1 + 5 = 6 ms: 12 - 6 = 6 ms show, split 1:5 like the host's work
    skewed = host_fields(prof, plan, fwd_s=0.001, bwd_s=0.005, mp_fwd=0.0, mp_bwd=0.0, update_s=0.0, notes=[])
    assert skewed["host_fwd_extra_s"] == pytest.approx(0.001) and skewed["host_bwd_extra_s"] == pytest.approx(0.005)
    # host 4 + 8 ms; GPU forward 1 + 4 (MP) = 5 ms, backward 2 ms: a per-step max would add 0 + 6 ms,
    # a host running ahead over the micro-batch adds 12 - 7 = 5 ms
    over = host_fields(prof, plan, fwd_s=0.001, bwd_s=0.002, mp_fwd=0.004, mp_bwd=0.0, update_s=0.0, notes=[])
    assert over["host_fwd_extra_s"] + over["host_bwd_extra_s"] == pytest.approx(0.005)
    assert over["host_fwd_extra_s"] == pytest.approx(0.005 / 3)
    prof.host_overhead["megatron_eager"]["overlap"] = "overlapped"  # the per-step rule, for contrast
    per_step = host_fields(prof, plan, fwd_s=0.001, bwd_s=0.002, mp_fwd=0.004, mp_bwd=0.0, update_s=0.0, notes=[])
    assert (per_step["host_fwd_extra_s"], per_step["host_bwd_extra_s"]) == (0.0, pytest.approx(0.006))


def test_a_runtime_without_a_measurement_is_a_note():
    notes: list[str] = []

    class Partial:
        name = "p"
        host_overhead = {"eager": {"per_layer_s": 0.001, "per_iteration_s": 0.0, "overlap": "overlapped"}}

    assert host_fields(Partial(), _plan(2), 0.01, 0.02, 0.0, 0.0, 0.0, notes) == {}
    assert notes and "dtensor_tp" in notes[0]


def _tp2_setup(per_layer_s: float = 0.003, factors: dict[str, float] | None = None):
    """A host-bound tp2 stage on a 2-GPU HGX node (3 ms a layer-step: far above the GPU's work), a
    roofline profile with the overlapped host lines of :class:`_Profile`, and a scenario-like holder."""
    from types import SimpleNamespace

    from trainsim.calibration.roofline import RooflineProfile
    from trainsim.topology import get_cluster
    from trainsim.topology.cluster import cluster_from_mapping

    model = ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=3, precision="bf16", recompute="none", framework="hf",
                      zero_stage=0)
    par = Parallelism(mp=2)
    cluster = cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": 2})
    prof = RooflineProfile("r", get_cluster("hgx-h100").gpu.peak_flops, 3e12)
    prof.host_overhead = _Profile("overlapped").host_overhead
    prof.host_overhead["dtensor_tp"]["per_layer_s"] = per_layer_s
    if factors is not None:
        prof.host_overhead["dtensor_tp"]["lease_factors"] = factors
    sc = SimpleNamespace(training=tr, parallelism=par, cluster=cluster, profile=SimpleNamespace(power_cap=None))
    return sc, build_stage_plans(model, tr, par), prof


def test_the_simulated_step_carries_the_host_excess():
    from trainsim.sim.costs import build_costs
    from trainsim.sim.engine import simulate

    sc, plans, prof = _tp2_setup()  # 12 ms per micro-batch: far above the GPU's
    tr, par, cluster = sc.training, sc.parallelism, sc.cluster
    costs = build_costs(plans, tr, par, cluster, prof)
    st = costs.stages[0]
    assert st.host_fwd_extra_s > 0 and st.host_bwd_extra_s > 0
    res = simulate(costs, cluster, mode="realistic", seed=0)
    assert res.breakdown["host"] == pytest.approx(3 * (st.host_fwd_extra_s + st.host_bwd_extra_s))
    # each step lasts its host time, GPU work and MP collectives hidden behind it, and then (the
    # DTensor runtime's flow shop) the GPU runs what the host issued last in each direction
    steps = 3 * (st.fwd_compute_s + st.mp_fwd_s + st.host_fwd_extra_s + st.bwd_compute_s + st.mp_bwd_s
                 + st.host_bwd_extra_s)
    # (one operator's GPU work: well under 1 % of a step this host-bound)
    assert 3 * 0.012 <= steps < 1.01 * 3 * 0.012
    assert res.iteration_s == pytest.approx(steps + st.update_s, rel=1e-9)


def test_machines_of_one_kind_are_a_speed_factor_each_and_weigh_the_same():
    # the kind's line: 3 ms per layer and micro-batch + 20 ms; machine A runs its host 0.8x, B 1.25x
    # (geometric mean 1), A measured at four sizes, B at one only: B still moves the line's level.
    def line(L: int, m: int) -> float:
        return 0.020 + 0.003 * L * m

    rows = [{**_row("tp2", L, m, 0.8 * line(L, m)), "lease": "A"} for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    rows += [{**_row("tp4", 8, 4, 1.25 * line(8, 4)), "lease": "B"}] * 3
    t = fit_host_overhead(rows)["dtensor_tp"]
    assert t["per_layer_s"] == pytest.approx(0.003, rel=1e-6)
    assert t["per_iteration_s"] == pytest.approx(0.020, rel=1e-6)
    assert t["lease_factors"] == pytest.approx({"A": 0.8, "B": 1.25}, rel=1e-6)
    assert t["leases"] == 2 and t["rows"] == 7
    # one machine alone: its factor is 1 and the line is its own
    alone = fit_host_overhead(rows[:4])["dtensor_tp"]
    assert alone["lease_factors"] == pytest.approx({"A": 1.0})
    assert alone["per_layer_s"] == pytest.approx(0.8 * 0.003, rel=1e-6)


def test_the_lines_can_be_one_gpu_kinds_typical_host():
    # the same rows with B's device an H200: normalised over the H200 machines alone, B is x1 and the
    # line is B's own (1.25x the geometric mean's); a device no row has is refused
    def line(L: int, m: int) -> float:
        return 0.020 + 0.003 * L * m

    rows = [{**_row("tp2", L, m, 0.8 * line(L, m)), "lease": "A"} for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    rows += [{**_row("tp4", 8, 4, 1.25 * line(8, 4)), "lease": "B", "device": "NVIDIA H200"}] * 3
    t = fit_host_overhead(rows, typical="H200")["dtensor_tp"]
    assert t["lease_factors"] == pytest.approx({"A": 0.8 / 1.25, "B": 1.0}, rel=1e-6)
    assert t["per_layer_s"] == pytest.approx(1.25 * 0.003, rel=1e-6)
    assert t["per_iteration_s"] == pytest.approx(1.25 * 0.020, rel=1e-6)
    with pytest.raises(ConfigError, match="--typical"):
        fit_host_overhead(rows, typical="B200")


def test_a_host_bound_step_notes_how_much_the_machines_differ():
    prof = _Profile("overlapped")
    prof.host_overhead["dtensor_tp"]["lease_factors"] = {"A": 0.87, "B": 1.18}
    notes: list[str] = []
    host_fields(prof, _plan(2), 0.002, 0.004, 0.001, 0.0, 0.004, notes)
    assert len(notes) == 1 and "x0.87 to x1.18" in notes[0] and "2 machines" in notes[0]
    assert "6-24 % above the fastest" in notes[0]  # and how much it wanders within a run
    gpu_bound: list[str] = []  # GPU-bound: the host's speed does not matter; what was measured there does
    host_fields(prof, _plan(2), 0.020, 0.040, 0.0, 0.0, 0.004, gpu_bound)
    assert len(gpu_bound) == 1 and "slower than predicted" in gpu_bound[0] and "GPU-bound shapes" in gpu_bound[0]
    quiet: list[str] = []  # the eager runtime, GPU-bound: no note
    host_fields(prof, _plan(1), 0.020, 0.040, 0.0, 0.0, 0.004, quiet)
    assert quiet == []


def test_the_update_host_work_hides_behind_the_last_micro_batchs_backlog():
    # eager: 4 layers x 1 ms = 4 ms of host per micro-batch, 10 ms per iteration
    prof = _Profile("overlapped")
    prof.host_overhead["eager"] = {"per_layer_s": 0.001, "per_iteration_s": 0.010, "overlap": "overlapped"}
    # GPU-bound: 30 ms of GPU work per micro-batch leave a 26 ms backlog when the host is done
    gpu_bound = host_fields(prof, _plan(1), 0.010, 0.020, 0.0, 0.0, 0.002, [])
    assert gpu_bound["host_update_s"] == 0.0
    # a backlog of 3 ms (7 ms GPU) and a 2 ms update: 10 - 3 - 2 = 5 ms of the host's show
    small = host_fields(prof, _plan(1), 0.002, 0.005, 0.0, 0.0, 0.002, [])
    assert small["host_update_s"] == pytest.approx(0.010 - 0.003 - 0.002)


def test_a_pipeline_runtime_grows_with_its_critical_path_and_borrows_the_machines_speed():
    # eager on two machines (A 0.8x, B 1.25x); the pipelined runtime measured on A only, at 3 ms per
    # layer-step of its host's critical path, layers / pp * m: its line is the kind's, not A's
    def eager(L: int, m: int) -> float:
        return 0.010 + 0.002 * L * m

    def piped(L: int, m: int, pp: int) -> float:
        return 0.001 + 0.003 * L / pp * m

    rows = [{**_row("1gpu", L, m, 0.8 * eager(L, m)), "lease": "A"} for L, m in ((4, 4), (8, 4), (8, 8))]
    rows += [{**_row("1gpu", L, m, 1.25 * eager(L, m)), "lease": "B"} for L, m in ((4, 4), (8, 8))]
    rows += [{**_row(f"pp{pp}", L, m, 0.8 * piped(L, m, pp)), "lease": "A"} for L, m, pp in ((8, 4, 2), (12, 8, 4))]
    t = fit_host_overhead(rows)
    assert t["eager"]["lease_factors"] == pytest.approx({"A": 0.8, "B": 1.25}, rel=1e-6)
    assert t["eager_pp"]["lease_factors"] == pytest.approx({"A": 0.8}, rel=1e-6)
    assert t["eager_pp"]["per_layer_s"] == pytest.approx(0.003, rel=1e-6)
    assert t["eager_pp"]["per_iteration_s"] == pytest.approx(0.001, rel=1e-6)


def test_a_table_without_the_pipeline_runtime_prices_stages_with_the_plain_one():
    from trainsim.operators import Parallelism, build_stage_plans

    model = ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=2, precision="bf16", recompute="none", framework="hf",
                      zero_stage=0)
    plan = build_stage_plans(model, tr, Parallelism(pp=2, mp=2))[0]
    assert plan.runtime == "dtensor_tp_pp"
    notes: list[str] = []
    f = host_fields(_Profile("overlapped"), plan, 0.001, 0.002, 0.0, 0.0, 0.001, notes)
    assert f["host_fwd_s"] + f["host_bwd_s"] == pytest.approx(0.003 * plan.encoders)
    assert any("dtensor_tp runtime's" in n for n in notes)


def test_ddp_has_its_own_line_and_the_eager_models_head_tail_and_checkpoint(tmp_path):
    import json

    from trainsim.calibration.host_overhead import CHECKPOINT_FILE, HOST_FILE
    # one machine: one GPU at 2 ms per layer-step + 4 ms; DDP around the same model 2.4 ms + 7 ms
    ends = {"head_fwd": 0.4, "tail_fwd": 0.3, "head_bwd": 0.1, "tail_bwd": 0.2}  # 1 layer per micro-batch
    rows = [_row("1gpu", L, m, 0.004 + 0.002 * m * (L + 1)) for L, m in ((4, 4), (8, 4), (4, 8))]
    rows += [_row("dp2", L, m, 0.007 + 0.0024 * m * (L + 1)) for L, m in ((4, 4), (8, 8))]
    t = fit_host_overhead(rows, {"eager": ends})
    assert t["eager"]["per_layer_s"] == pytest.approx(0.002) and t["eager"]["per_iteration_s"] == pytest.approx(0.004)
    assert t["ddp"]["per_layer_s"] == pytest.approx(0.0024) and t["ddp"]["per_iteration_s"] == pytest.approx(0.007)
    assert t["ddp"]["head_tail"] == ends  # DDP wraps the eager model: its ends are the model's
    (tmp_path / HOST_FILE).write_text(json.dumps({"runtimes": t}))
    (tmp_path / CHECKPOINT_FILE).write_text(json.dumps({"runtimes": {"eager": {"checkpoint_s": 0.0018}}}))
    assert load_host_overhead(tmp_path / HOST_FILE)["ddp"]["checkpoint_s"] == 0.0018


def test_a_table_without_ddp_prices_it_with_the_eager_line_and_says_so():
    model = ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128, vocab=50432)
    tr = TrainingSpec(micro_batch=1, micro_batches=2, precision="bf16", recompute="none", framework="hf",
                      zero_stage=0)
    plan = build_stage_plans(model, tr, Parallelism(dp=2))[0]
    assert plan.runtime == "ddp"
    notes: list[str] = []
    f = host_fields(_Profile("overlapped"), plan, 0.001, 0.002, 0.0, 0.0, 0.001, notes)  # eager: 1 ms a layer
    assert f["host_fwd_s"] + f["host_bwd_s"] == pytest.approx(0.001 * plan.encoders)
    assert any("ddp runtime" in n and "eager runtime's, which it wraps" in n for n in notes)


def _issue_plan():
    model = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")
    tr = TrainingSpec(micro_batch=1, micro_batches=2, recompute="none", framework="hf")
    (plan,) = build_stage_plans(model, tr, Parallelism())
    return plan


HEAD_TAIL = {"head_fwd": 0.4, "tail_fwd": 0.3, "head_bwd": 0.1, "tail_bwd": 0.2}


def test_the_fit_counts_the_head_and_tail_as_layers_of_every_micro_batch():
    # eager rows made with 2 ms per layer-step, 1 ms per iteration and a 1-layer head and tail per
    # micro-batch: the fit with the head and tail recovers the line, and stores them; other
    # runtimes' rows are untouched by them
    rows = [_row("1gpu", L, m, 0.001 + 0.002 * m * (L + 1.0)) for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    rows += [_row("tp2", L, m, 0.005 + 0.003 * L * m) for L, m in ((4, 4), (8, 4), (4, 8))]
    t = fit_host_overhead(rows, {"eager": HEAD_TAIL})
    assert t["eager"]["per_layer_s"] == pytest.approx(0.002) and t["eager"]["per_iteration_s"] == pytest.approx(0.001)
    assert t["eager"]["head_tail"] == HEAD_TAIL and "head_tail" not in t["dtensor_tp"]
    assert t["dtensor_tp"]["per_layer_s"] == pytest.approx(0.003)
    # without them the per-micro-batch term is absorbed: the line is another one
    assert fit_host_overhead(rows)["eager"]["per_layer_s"] != pytest.approx(0.002, rel=0.05)


def test_each_runtime_fits_with_its_own_head_and_tail():
    # DTensor TP rows made with 9 ms per layer-step, 3 ms per iteration and a head and tail of 1.5
    # layers per micro-batch (its own, not the eager runtime's 1.0): each line is recovered
    tp_ends = {"head_fwd": 0.3, "tail_fwd": 0.5, "head_bwd": 0.1, "tail_bwd": 0.6}
    rows = [_row("1gpu", L, m, 0.001 + 0.002 * m * (L + 1.0)) for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    rows += [_row("tp2", L, m, 0.003 + 0.009 * m * (L + 1.5)) for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    t = fit_host_overhead(rows, {"eager": HEAD_TAIL, "dtensor_tp": tp_ends})
    assert t["dtensor_tp"]["per_layer_s"] == pytest.approx(0.009)
    assert t["dtensor_tp"]["per_iteration_s"] == pytest.approx(0.003)
    assert t["dtensor_tp"]["head_tail"] == tp_ends and t["eager"]["per_layer_s"] == pytest.approx(0.002)
    # the eager runtime's ends given to DTensor TP: another line (the per-micro-batch term differs)
    assert fit_host_overhead(rows, {"eager": HEAD_TAIL, "dtensor_tp": HEAD_TAIL})["dtensor_tp"]["per_layer_s"] \
        != pytest.approx(0.009, rel=0.02)
    # FSDP2 alone takes none (not measured)
    with pytest.raises(ConfigError, match="fsdp2"):
        fit_host_overhead(rows, {"fsdp2": tp_ends})


def test_a_pipelines_ends_sit_on_its_first_and_last_stage():
    from trainsim.calibration.host_overhead import layer_steps, pipeline_steps

    # pp2, 8 layers, m = 4, head 0.5 and tail 1.0 layers: stages of 4.5 and 5 layer-steps; the hosts
    # issue ahead, so the slower stage's four steps (no fill or drain on the host)
    assert pipeline_steps("pp2", 8, 4, 0.5, 1.0) == pytest.approx(4 * 5)
    assert pipeline_steps("pp2xtp2", 8, 4, 0.0, 0.0) == layer_steps("pp2xtp2", 8, 4) == 16
    # 9 layers over 2 stages: 4 and 5 (the remainder last, as the trainer splits them)
    assert pipeline_steps("pp2", 9, 4, 0.0, 0.0) == pytest.approx(4 * 5)
    assert pipeline_steps("pp4", 9, 4, 0.3, 0.0) == pytest.approx(4 * 3)  # stages 2.3, 2, 2, 3
    # the fit recovers a pipelined line made with its ends
    ends = {"head_fwd": 0.2, "head_bwd": 0.0, "tail_fwd": 0.2, "tail_bwd": 0.4}
    rows = [_row("pp2", L, m, 0.002 + 0.003 * pipeline_steps("pp2", L, m, 0.2, 0.6))
            for L, m in ((4, 4), (8, 4), (4, 8), (8, 8))]
    t = fit_host_overhead(rows, {"eager_pp": ends})
    assert t["eager_pp"]["per_layer_s"] == pytest.approx(0.003) and t["eager_pp"]["head_tail"] == ends


def test_the_head_and_tail_are_the_probes_medians_and_a_bad_file_is_named(tmp_path):
    import json

    lines = [{"head_fwd": h, "tail_fwd": 0.3, "head_bwd": 0.1, "tail_bwd": 0.35, "layers_fwd_us": 400.0,
              "layers_bwd_us": b} for h, b in ((0.3, 600.0), (0.4, 600.0), (0.5, 1600.0))]
    p = tmp_path / "head.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    got = read_head_tail(str(p))
    assert got == {"head_fwd": pytest.approx(0.4), "tail_fwd": 0.3, "head_bwd": 0.1, "tail_bwd": 0.35}
    p.write_text(json.dumps({"head_fwd": 0.3}) + "\n")
    with pytest.raises(ConfigError, match="head.jsonl"):
        read_head_tail(str(p))


def test_a_parallel_probes_lines_count_for_their_layouts_runtime(tmp_path):
    import json

    def line(layout: str, h: float) -> dict:
        return {"layout": layout, "head_fwd": h, "tail_fwd": 0.4, "head_bwd": 0.05, "tail_bwd": 0.3}

    p = tmp_path / "parallel_head.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in
                         (line("1gpu", 0.5), line("tp2", 0.2), line("tp2", 0.3), line("tp4", 0.9))))
    assert read_head_tail(str(p), "dtensor_tp")["head_fwd"] == pytest.approx(0.3)  # median of 0.2, 0.3, 0.9
    assert read_head_tail(str(p), "eager")["head_fwd"] == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="no line of the fsdp2 runtime"):
        read_head_tail(str(p), "fsdp2")
    assert parse_head_tail_arg("dtensor_tp=a.jsonl") == ("dtensor_tp", "a.jsonl")
    assert parse_head_tail_arg("a.jsonl") == ("eager", "a.jsonl")
    with pytest.raises(ConfigError, match="--head-tail"):
        parse_head_tail_arg("fsdp2=a.jsonl")


def test_a_pipelines_stage_lines_give_each_end_from_the_stage_that_runs_it(tmp_path):
    import json

    p = tmp_path / "pp.jsonl"
    lines = [{"layout": "pp2", "stage": 0, "head_fwd": 0.2, "head_bwd": 0.02},
             {"layout": "pp2", "stage": 1, "tail_fwd": 0.15, "tail_bwd": 0.3},
             {"layout": "pp2", "stage": 0, "head_fwd": 0.4, "head_bwd": 0.04}]
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    got = read_head_tail(str(p), "eager_pp")
    assert got == pytest.approx({"head_fwd": 0.3, "head_bwd": 0.03, "tail_fwd": 0.15, "tail_bwd": 0.3})
    p.write_text(json.dumps(lines[0]) + "\n")  # no last stage: no tail
    with pytest.raises(ConfigError, match="gives all of"):
        read_head_tail(str(p), "eager_pp")


def test_a_runtime_given_several_files_takes_the_median_of_all_their_lines(tmp_path):
    import json

    def write(name: str, heads: tuple[float, ...]) -> str:
        p = tmp_path / name
        p.write_text("".join(json.dumps({"layout": "tp2", **HEAD_TAIL, "head_fwd": h}) + "\n" for h in heads))
        return str(p)

    one, two = write("a.jsonl", (0.1, 0.2)), write("b.jsonl", (0.3, 0.4, 0.5))
    assert read_head_tail([one, two], "dtensor_tp")["head_fwd"] == pytest.approx(0.3)
    rows = tmp_path / "rows.csv"
    rows.write_text("layout,layers,micro_batches,min_s,lease,device\n"
                    "tp2,4,4,0.2,A,H100\ntp2,8,4,0.35,A,H100\ntp2,4,8,0.4,A,H100\n")
    out = tmp_path / "host.json"
    assert main([str(rows), "--head-tail", f"dtensor_tp={one}", "--head-tail", f"dtensor_tp={two}",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["runtimes"]["dtensor_tp"]["head_tail"]["head_fwd"] == pytest.approx(0.3)
    assert doc["head_tail_sources"] == {"dtensor_tp": [one, two]}


def test_a_table_with_a_negative_head_is_refused(tmp_path):
    import json

    p = tmp_path / "host_overhead.json"
    p.write_text(json.dumps({"runtimes": {"eager": {"per_layer_s": 0.002, "per_iteration_s": 0.0,
                                                    "overlap": "overlapped", "head_tail": {**HEAD_TAIL,
                                                                                           "head_fwd": -0.1}}}}))
    with pytest.raises(ConfigError, match="head_tail.head_fwd"):
        load_host_overhead(p)


def test_the_flow_shop_waits_out_the_whole_head_after_the_synchronisation():
    from trainsim.sim.host_time import issue_flow_shop
    plan = _issue_plan()
    per_layer = 0.003
    n, k = plan.encoders, len(plan.issue_layer)
    ops = {*plan.issue_head, *plan.issue_layer, *plan.issue_tail}
    # GPU-bound (every kernel 10 ms): the GPU idles only while the head is issued, all of it
    slow = dict.fromkeys(ops, 0.010)
    idle_f, idle_b, backlog = issue_flow_shop(plan, slow, slow, per_layer, head_tail=HEAD_TAIL)
    first = HEAD_TAIL["head_fwd"] * per_layer / len(plan.issue_head)
    assert idle_f == pytest.approx(first) and idle_b == pytest.approx(0.0, abs=1e-15)
    # host-bound (kernels free): the GPU idles for the whole host time, which is the line with the
    # head and tail, each layer's split evenly between its forward and backward (a norm that is
    # both a layer's and the tail's operator is priced by its position)
    free = dict.fromkeys(ops, 0.0)
    idle_f, idle_b, backlog = issue_flow_shop(plan, free, free, per_layer, head_tail=HEAD_TAIL)
    assert idle_f == pytest.approx(per_layer * (HEAD_TAIL["head_fwd"] + HEAD_TAIL["tail_fwd"] + 0.5 * n))
    assert idle_b == pytest.approx(per_layer * (HEAD_TAIL["head_bwd"] + HEAD_TAIL["tail_bwd"] + 0.5 * n))
    assert backlog == 0.0 and k > 1
    # a table without them is the even spread, to the bit
    assert issue_flow_shop(plan, slow, slow, per_layer, head_tail=None) == issue_flow_shop(plan, slow, slow, per_layer)


def test_a_step_charges_the_head_and_tail_in_its_host_time():
    prof = _Profile("overlapped")
    plan = dataclasses.replace(_plan(1), runtime="eager")
    plain = host_fields(prof, plan, 0.002, 0.004, 0.0, 0.0, 0.004, [])
    prof.host_overhead["eager"] = {**prof.host_overhead["eager"], "head_tail": HEAD_TAIL}
    with_ends = host_fields(prof, plan, 0.002, 0.004, 0.0, 0.0, 0.004, [])
    ends = HEAD_TAIL["head_fwd"] + HEAD_TAIL["tail_fwd"] + HEAD_TAIL["head_bwd"] + HEAD_TAIL["tail_bwd"]
    total = with_ends["host_fwd_s"] + with_ends["host_bwd_s"]
    assert total == pytest.approx(plain["host_fwd_s"] + plain["host_bwd_s"] + 0.001 * ends)


def test_the_flow_shop_by_hand():
    from trainsim.sim.host_time import issue_flow_shop
    plan = _issue_plan()
    ops = [*plan.issue_head, *plan.issue_layer * plan.encoders, *plan.issue_tail]
    n = len(ops)  # operators issued per direction; the host line spreads 2 x n over them
    per_layer = 0.003
    h = per_layer * plan.encoders / (2 * n)
    # GPU-bound (every kernel 2h): the GPU idles only while the first operator is issued
    slow = {op: 2 * h for op in ops}
    idle_f, idle_b, backlog = issue_flow_shop(plan, slow, slow, per_layer)
    assert idle_f == pytest.approx(h) and idle_b == pytest.approx(0.0, abs=1e-15)
    assert backlog == pytest.approx(h + 2 * n * 2 * h - 2 * n * h)  # GPU end - host end
    # host-bound (every kernel h/2): the first waits h, every later one h/2
    fast = {op: h / 2 for op in ops}
    idle_f, idle_b, backlog = issue_flow_shop(plan, fast, fast, per_layer)
    assert idle_f == pytest.approx(h + (n - 1) * h / 2) and idle_b == pytest.approx(n * h / 2)
    assert backlog == pytest.approx(h / 2)
    # no issue order (a Megatron plan): no flow shop
    assert issue_flow_shop(build_stage_plans(ModelSpec("m", hidden=256, heads=4, layers=2, seq_len=128, vocab=1000),
                                             TrainingSpec(), Parallelism())[0], slow, slow, per_layer) is None


def test_an_eager_step_pays_the_flow_shops_idle_beyond_its_step_maxima():
    # kernels alternate long and short around the host's issue time: per step the host total is
    # below the GPU total (no host excess), yet the GPU idles behind the short ones
    from trainsim.sim.host_time import issue_flow_shop
    plan = _issue_plan()
    prof = _Profile("overlapped")
    prof.host_overhead = {"eager": {"per_layer_s": 0.003, "per_iteration_s": 0.0, "overlap": "overlapped"}}
    plan = dataclasses.replace(plan, runtime="eager")
    ops = sorted({*plan.issue_head, *plan.issue_layer, *plan.issue_tail}, key=repr)
    n = len(plan.issue_head) + len(plan.issue_layer) * plan.encoders + len(plan.issue_tail)
    h = 0.003 * plan.encoders / (2 * n)
    prices = {op: (4 * h if i % 2 else h / 4) for i, op in enumerate(ops)}
    fwd_s = sum(prices[op] for op in [*plan.issue_head, *plan.issue_layer * plan.encoders, *plan.issue_tail])
    notes: list[str] = []
    plain = host_fields(prof, plan, fwd_s, fwd_s, 0.0, 0.0, 0.001, notes)
    shop = host_fields(prof, plan, fwd_s, fwd_s, 0.0, 0.0, 0.001, notes, (prices, prices))
    idle_f, idle_b, _ = issue_flow_shop(plan, prices, prices, 0.003)
    assert shop["host_fwd_extra_s"] == pytest.approx(idle_f) and shop["host_bwd_extra_s"] == pytest.approx(idle_b)
    assert idle_f + idle_b > plain["host_fwd_extra_s"] + plain["host_bwd_extra_s"]


def test_a_checkpointed_layer_reissues_its_recompute():
    from trainsim.sim.host_time import issue_flow_shop
    model = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")
    (plan,) = build_stage_plans(model, TrainingSpec(micro_batch=1, micro_batches=2, recompute="full",
                                                    framework="hf"), Parallelism())
    assert plan.issue_recompute
    ops = {*plan.issue_head, *plan.issue_layer, *plan.issue_tail, *plan.issue_recompute}
    n = len(plan.issue_head) + len(plan.issue_layer) * plan.encoders + len(plan.issue_tail)
    h = 0.003 * plan.encoders / (2 * n)
    fast = {op: h / 2 for op in ops}
    _f, idle_b, _ = issue_flow_shop(plan, fast, fast, 0.003)
    # host-bound: every backward operator, and every re-issued forward one, leaves the GPU h/2 idle
    assert idle_b == pytest.approx((n + plan.encoders * len(plan.issue_recompute)) * h / 2)


def test_a_checkpointed_layer_costs_the_host_its_checkpoint_before_the_recompute():
    from trainsim.sim.host_time import issue_flow_shop
    model = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")
    (plan,) = build_stage_plans(model, TrainingSpec(micro_batch=1, micro_batches=2, recompute="full",
                                                    framework="hf"), Parallelism())
    ops = {*plan.issue_head, *plan.issue_layer, *plan.issue_tail, *plan.issue_recompute}
    n = len(plan.issue_head) + len(plan.issue_layer) * plan.encoders + len(plan.issue_tail)
    h = 0.003 * plan.encoders / (2 * n)
    c = 0.002
    fast = {op: h / 2 for op in ops}
    # host-bound: the GPU waits out every checkpoint in the backward, the forward is untouched
    f0, b0, k0 = issue_flow_shop(plan, fast, fast, 0.003)
    f1, b1, k1 = issue_flow_shop(plan, fast, fast, 0.003, checkpoint_s=c)
    assert f1 == f0 and b1 == pytest.approx(b0 + plan.encoders * c) and k1 == pytest.approx(k0, abs=1e-12)
    # GPU-bound (each kernel 3 ms, far above h + c): the checkpoints hide behind the kernels
    slow = {op: 0.003 for op in ops}
    assert issue_flow_shop(plan, slow, slow, 0.003, checkpoint_s=c)[1] == pytest.approx(0.0, abs=1e-15)
    # without recompute there is no checkpoint to pay, and c = 0 is the old shop to the bit
    (plain,) = build_stage_plans(model, TrainingSpec(micro_batch=1, micro_batches=2, recompute="none",
                                                     framework="hf"), Parallelism())
    assert issue_flow_shop(plain, fast, fast, 0.003, checkpoint_s=c) == issue_flow_shop(plain, fast, fast, 0.003)


def test_the_checkpoint_table_joins_the_host_table_and_a_bad_one_names_its_file(tmp_path):
    import json

    from trainsim.calibration.host_overhead import CHECKPOINT_FILE, HOST_FILE
    host = {"runtimes": {"eager": {"per_layer_s": 0.002, "per_iteration_s": 0.0, "overlap": "overlapped"}}}
    (tmp_path / HOST_FILE).write_text(json.dumps(host))
    assert "checkpoint_s" not in load_host_overhead(tmp_path / HOST_FILE)["eager"]
    (tmp_path / CHECKPOINT_FILE).write_text(json.dumps({"runtimes": {"eager": {"checkpoint_s": 0.0018}}}))
    assert load_host_overhead(tmp_path / HOST_FILE)["eager"]["checkpoint_s"] == 0.0018
    for bad in ('{"runtimes": {"fsdp2": {"checkpoint_s": 0.001}}}', '{"runtimes": {"eager": {"checkpoint_s": -1}}}',
                '{"runtimes": []}', "{"):
        (tmp_path / CHECKPOINT_FILE).write_text(bad)
        with pytest.raises(ConfigError, match=CHECKPOINT_FILE):
            load_host_overhead(tmp_path / HOST_FILE)


def test_the_shipped_checkpoint_cost_is_what_its_command_fits(tmp_path):
    # the command recorded in the shipped file, run again on the committed probe rows (validation/
    # checkpoint_h100/), gives the shipped value: 1.870 ms per checkpointed layer and micro-batch
    import json
    import subprocess
    import sys
    from pathlib import Path

    from trainsim.calibration.host_overhead import CHECKPOINT_FILE
    root = Path(__file__).resolve().parents[1]
    shipped = json.loads((root / "calibration/profiles/h100-sxm-bf16" / CHECKPOINT_FILE).read_text())
    args = shipped["command"].split()[2:]
    out = tmp_path / "ck.json"
    args[args.index("--out") + 1] = str(out)
    subprocess.run([sys.executable, str(root / "validation/fit_checkpoint_overhead.py"), *args], cwd=root,
                   check=True, capture_output=True)
    got = json.loads(out.read_text())["runtimes"]["eager"]["checkpoint_s"]
    assert got == shipped["runtimes"]["eager"]["checkpoint_s"]
    assert 0.001 < got < 0.003


def test_the_shipped_host_table_is_what_its_command_fits(tmp_path, monkeypatch):
    # the command in calibration/host_overhead.py's doc, on the files the table names
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shipped_path = root / "calibration" / "profiles" / "h100-sxm-bf16" / "host_overhead.json"
    shipped = json.loads(shipped_path.read_text())
    sources = sorted(root.glob("validation/measured_hf_parallel_h100_host_*.csv"))
    sources += sorted(root.glob("validation/train3d_host_h*/tiny.csv"))
    assert sorted(p.relative_to(root).as_posix() for p in sources) == sorted(shipped["source"])
    out = tmp_path / "host.json"
    monkeypatch.chdir(root)  # a lease-less file's machine is named by its folder and stem
    ends = [a for rt, paths in shipped["head_tail_sources"].items() for path in paths
            for a in ("--head-tail", f"{rt}={path}")]
    assert main([str(p.relative_to(root)) for p in sources] + ends + ["--out", str(out)]) == 0
    fitted = json.loads(out.read_text())["runtimes"]
    assert set(fitted) == set(shipped["runtimes"])
    for rt, v in shipped["runtimes"].items():
        assert fitted[rt]["per_layer_s"] == pytest.approx(v["per_layer_s"], rel=1e-9), rt
        assert fitted[rt]["per_iteration_s"] == pytest.approx(v["per_iteration_s"], rel=1e-9, abs=1e-12), rt
        assert fitted[rt]["lease_factors"] == pytest.approx(v["lease_factors"], rel=1e-9), rt
        assert fitted[rt].get("head_tail") == v.get("head_tail"), rt
    assert 1.0 < sum(shipped["runtimes"]["eager"]["head_tail"].values()) < 1.3
    # DTensor TP's, measured: about a layer of its own; under FSDP2 more (validation/probe_parallel_head_host.py)
    assert 0.8 < sum(shipped["runtimes"]["dtensor_tp"]["head_tail"].values()) < 1.3
    assert 1.1 < sum(shipped["runtimes"]["fsdp2_tp"]["head_tail"].values()) < 1.6
    # the eager pipeline's stages: small ends (no causal mask, the loss on the last stage alone)
    assert 0.3 < sum(shipped["runtimes"]["eager_pp"]["head_tail"].values()) < 1.0


def test_a_host_bound_note_gives_the_spread_of_every_machine_measured():
    # two machines agreeing on one runtime do not make the kind's hosts agree
    prof = _Profile("overlapped")
    prof.host_overhead["dtensor_tp"]["lease_factors"] = {"Q": 0.99, "R": 1.01}
    prof.host_overhead["eager"]["lease_factors"] = {"A": 0.85, "B": 1.16}
    notes: list[str] = []
    host_fields(prof, _plan(2), 0.002, 0.004, 0.001, 0.0, 0.004, notes)
    assert len(notes) == 1 and "x0.85 to x1.16" in notes[0] and "4 machines" in notes[0]


def _tp_plan(recompute: str = "none"):
    model = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")
    tr = TrainingSpec(micro_batch=1, micro_batches=2, recompute=recompute, framework="hf")
    (plan,) = build_stage_plans(model, tr, Parallelism(mp=2))
    return plan


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_tp_plans_issue_order_places_every_mp_allreduce(recompute):
    # the all-reduces the flow shop places after operators are the plan's MP collectives, entry for
    # entry: layer operators run once per layer, the head's and the tail's once
    from trainsim.operators import OpKind
    plan = _tp_plan(recompute)
    assert plan.runtime == "dtensor_tp" and plan.issue_mp
    layer_kinds = {op.kind for op in plan.issue_layer} - {op.kind for op in (*plan.issue_head, *plan.issue_tail)}
    placed = {"fwd": 0, "bwd": 0}
    for pass_, kind, entries, count in plan.issue_mp:
        times = plan.encoders if kind in layer_kinds else 1
        placed["fwd" if pass_ == "fwd" else "bwd"] += entries * count * times
        ops = plan.issue_recompute if pass_ == "rec" else (*plan.issue_head, *plan.issue_layer, *plan.issue_tail)
        assert kind in {op.kind for op in ops}
    assert placed["fwd"] == sum(e * c for e, c in plan.mp_colls_fwd)
    assert placed["bwd"] == sum(e * c for e, c in plan.mp_colls_bwd)
    assert any(k is OpKind.HF_DENSE and p == "fwd" for p, k, _, _ in plan.issue_mp)


def test_the_flow_shop_runs_the_tp_allreduces_on_the_gpu_while_the_host_issues_on():
    # host-bound (every kernel h/2): an all-reduce of h/2 after each row-parallel output fills the
    # idle half-step that would follow it, so the forward idles n_layers * 2 * h/2 less; the
    # backward's all-reduces do the same for the column-parallel inputs' gradients
    from trainsim.operators import OpKind
    from trainsim.sim.host_time import issue_flow_shop
    plan = _tp_plan()
    ops = [*plan.issue_head, *plan.issue_layer * plan.encoders, *plan.issue_tail]
    h = 0.003 * plan.encoders / (2 * len(ops))
    fast = {op: h / 2 for op in ops}
    idle_f, idle_b, _ = issue_flow_shop(plan, fast, fast, 0.003)
    after = {("fwd", OpKind.HF_DENSE): h / 2, ("fwd", OpKind.HF_MLP_DOWN): h / 2,
             ("bwd", OpKind.HF_QKV): h / 2, ("bwd", OpKind.HF_MLP_UP): h / 2}
    idle_f2, idle_b2, _ = issue_flow_shop(plan, fast, fast, 0.003, mp_after=after)
    assert idle_f2 == pytest.approx(idle_f - 2 * plan.encoders * h / 2)
    # the backward's last layer operator before the head is QKV's: its all-reduce fills the gap
    # before the head's backward too, so every one of them counts
    assert idle_b2 == pytest.approx(idle_b - 2 * plan.encoders * h / 2)
    # GPU-bound, the all-reduces only lengthen the GPU's backlog
    slow = {op: 4 * h for op in ops}
    s_f, s_b, s_backlog = issue_flow_shop(plan, slow, slow, 0.003)
    t_f, t_b, t_backlog = issue_flow_shop(plan, slow, slow, 0.003, mp_after=after)
    assert (t_f, t_b) == pytest.approx((s_f, s_b)) and t_backlog == pytest.approx(s_backlog + 4 * plan.encoders * h / 2)


@pytest.mark.parametrize(("dp", "zero_stage", "runtime"), [(1, 0, "dtensor_tp"), (2, 3, "fsdp2_tp")])
def test_tensor_parallel_steps_pay_the_flow_shops_idle(dp, zero_stage, runtime):
    # DTensor TP, alone or inside FSDP2, synchronises at each micro-batch's start: its host excess
    # is the flow shop's idle with the all-reduces placed in issue order, not a per-step max
    from trainsim.operators import OpKind
    from trainsim.sim.host_time import issue_flow_shop
    model = ModelSpec("neox", hidden=256, heads=4, layers=3, seq_len=128, vocab=50432, attention="flash")
    tr = TrainingSpec(micro_batch=1, micro_batches=2, recompute="none", framework="hf", zero_stage=zero_stage)
    (plan,) = build_stage_plans(model, tr, Parallelism(mp=2, dp=dp))
    assert plan.runtime == runtime and plan.issue_mp
    prof = _Profile("overlapped")
    prof.host_overhead = {runtime: {"per_layer_s": 0.003, "per_iteration_s": 0.0, "overlap": "overlapped"}}
    ops = sorted({*plan.issue_head, *plan.issue_layer, *plan.issue_tail}, key=repr)
    n = len(plan.issue_head) + len(plan.issue_layer) * plan.encoders + len(plan.issue_tail)
    h = 0.003 * plan.encoders / (2 * n)
    prices = {op: (4 * h if i % 2 else h / 4) for i, op in enumerate(ops)}
    after = {("fwd", OpKind.HF_DENSE): h, ("bwd", OpKind.HF_QKV): h}
    fwd_s = sum(prices[op] for op in [*plan.issue_head, *plan.issue_layer * plan.encoders, *plan.issue_tail])
    got = host_fields(prof, plan, fwd_s, fwd_s, 0.0, 0.0, 0.001, [], (prices, prices), after)
    idle_f, idle_b, _ = issue_flow_shop(plan, prices, prices, 0.003, mp_after=after)
    assert got["host_fwd_extra_s"] == pytest.approx(idle_f) and got["host_bwd_extra_s"] == pytest.approx(idle_b)
    assert idle_f + idle_b > 0


def test_the_host_band_is_the_iteration_on_the_fastest_and_slowest_host():
    # host-bound throughout (3 ms a layer-step against microseconds of GPU): the host part of the
    # iteration scales with the factor, so the band's two sides stand as 0.2 : 0.25 around it
    from trainsim.scenarios.compose import host_band
    from trainsim.sim.costs import build_costs
    from trainsim.sim.eq7 import eq7

    sc, plans, prof = _tp2_setup(0.003, {"A": 0.8, "B": 1.25, "C": 1.0})
    mid = eq7(build_costs(plans, sc.training, sc.parallelism, sc.cluster, prof)).iteration_s
    band = host_band(sc, plans, prof, mid)
    assert band is not None and (band.lo_factor, band.hi_factor, band.machines) == (0.8, 1.25, 3)
    assert band.lo_s < mid < band.hi_s
    assert (band.hi_s - mid) / (mid - band.lo_s) == pytest.approx(0.25 / 0.2, rel=1e-9)
    assert prof.host_overhead["dtensor_tp"]["per_layer_s"] == 0.003  # the profile's own lines untouched
    # around the simulated time, by the same ratios
    assert band.scaled(mid, 2 * mid) == (pytest.approx(2 * band.lo_s), pytest.approx(2 * band.hi_s))
    assert "x0.80 to x1.25" in band.text(mid, mid) and "3 hosts" in band.text(mid, mid)


def test_no_host_band_where_the_gpu_hides_the_host_or_one_machine_was_measured():
    from trainsim.scenarios.compose import host_band

    sc, plans, prof = _tp2_setup(1e-9, {"A": 0.8, "B": 1.25})
    assert host_band(sc, plans, prof, 1.0) is None  # the spread moves the iteration by nothing
    sc, plans, prof = _tp2_setup(0.003, {"A": 1.0})
    prof.host_overhead["eager"]["lease_factors"] = {"A": 1.0}
    assert host_band(sc, plans, prof, 1.0) is None


def test_lease_less_tables_of_two_machines_with_one_file_name_stay_two_machines(tmp_path):
    from trainsim.calibration.host_overhead import read_rows

    paths = []
    for machine in ("BE", "BF"):
        d = tmp_path / machine / "host"
        d.mkdir(parents=True)
        (d / "measured.csv").write_text("layout,layers,micro_batches,min_s,device\ntp2,4,4,0.2,H200\n")
        paths.append(str(d / "measured.csv"))
    other = tmp_path / "train3d_host" / "tiny.csv"
    other.parent.mkdir()
    other.write_text("layout,layers,micro_batches,min_s,device\ntp2,4,4,0.2,H200\n")
    leases = [r["lease"] for r in read_rows([*paths, str(other)])]
    assert len(set(leases)) == 3 and leases[2] == "train3d_host/tiny"  # a unique name stays short
    assert leases[0].endswith("BE/host/measured") and leases[1].endswith("BF/host/measured")


def test_profile_host_factor_pins_the_machines_host(monkeypatch):
    # profile.host_factor scales every runtime's host line: on the band's own factors the iteration is
    # the band's edge, 1 is the typical host; a pinned host prints no band, and the label and JSON say it
    from trainsim.scenarios import compose
    from trainsim.scenarios.schema import scenario_from_mapping

    _, _, prof = _tp2_setup(0.003, {"A": 0.8, "B": 1.25, "C": 1.0})
    monkeypatch.setitem(compose._PROFILE_CACHE, ("pinned-test", None, None, None), prof)

    def run(factor=None):
        m = {"model": {"name": "m", "hidden": 256, "heads": 4, "layers": 4, "seq_len": 128, "vocab": 50432},
             "training": {"micro_batch": 1, "micro_batches": 3, "precision": "bf16", "recompute": "none",
                          "framework": "hf"},
             "parallelism": {"mp": 2}, "cluster": {"preset": "hgx-h100", "gpus_per_node": 2},
             "profile": {"name": "pinned-test", **({"host_factor": factor} if factor is not None else {})}}
        return compose.predict(scenario_from_mapping(m))

    typical = run()
    band = typical.host_band
    assert band is not None and (band.lo_factor, band.hi_factor) == (0.8, 1.25)
    assert run(1.0).eq7.iteration_s == pytest.approx(typical.eq7.iteration_s, rel=1e-12)
    slow, fast = run(1.25), run(0.8)
    assert slow.eq7.iteration_s == pytest.approx(band.hi_s, rel=1e-12)
    assert fast.eq7.iteration_s == pytest.approx(band.lo_s, rel=1e-12)
    assert slow.host_band is None and slow.profile_label.endswith("(host x1.25)")
    assert slow.to_json()["host_factor"] == 1.25 and typical.to_json()["host_factor"] is None
    assert prof.host_overhead["dtensor_tp"]["per_layer_s"] == 0.003  # the cached profile untouched
    # the scaled model survives a trip to another process (pickle: a worker pool, dask)
    import pickle
    pinned = pickle.loads(pickle.dumps(compose.duration_model(slow.scenario)))
    assert pinned.host_overhead["dtensor_tp"]["per_layer_s"] == pytest.approx(0.003 * 1.25)
    # a profile without host lines: the factor changes nothing, and the prediction says so
    monkeypatch.setattr(prof, "host_overhead", None)
    assert run(1.25).eq7.iteration_s == pytest.approx(run().eq7.iteration_s, rel=1e-12)
    assert any("profile.host_factor 1.25" in w and "changes nothing" in w for w in run(1.25).warnings)


@pytest.mark.parametrize("value, message", [(0, "must be positive"), (-1.5, "must be positive"),
                                            (float("inf"), "must be a finite number"), ("fast", "must be a number"),
                                            (True, "must be a number")])
def test_profile_host_factor_refuses_what_is_not_a_positive_number(value, message):
    from trainsim.operators.errors import ConfigError
    from trainsim.scenarios.schema import ProfileSpec

    with pytest.raises(ConfigError, match=message) as e:
        ProfileSpec(name="h100-sxm-bf16", host_factor=value)
    assert e.value.field == "profile.host_factor"


def test_the_measured_forward_shares_are_the_probes_medians():
    # validation/probe_host_split.py's rows (GPU drained before each micro-batch): the median forward
    # share of each runtime's layouts, tiny and real shapes
    import json
    import statistics
    from pathlib import Path

    from trainsim.sim.host_time import HOST_FORWARD_SHARE

    rows = [json.loads(x) for x in (Path(__file__).resolve().parents[1] / "validation" / "host_split_h100_4gpu"
                                    / "host_split.jsonl").read_text().splitlines() if x]

    def share(*layouts):
        return statistics.median(r["split"]["fwd_s"] / (r["split"]["fwd_s"] + r["split"]["bwd_s"])
                                 for r in rows if r["layout"] in layouts)

    assert HOST_FORWARD_SHARE["fsdp2"] == pytest.approx(share("fsdp2", "fsdp4"), abs=0.005)
    assert HOST_FORWARD_SHARE["eager_pp"] == pytest.approx(share("1gpu"), abs=0.005)
    assert HOST_FORWARD_SHARE["dtensor_tp_pp"] == pytest.approx(share("tp2", "tp4"), abs=0.005)


def test_a_measured_runtime_splits_its_host_work_as_measured_others_as_the_gpu():
    from trainsim.sim.host_time import HOST_FORWARD_SHARE

    model = ModelSpec("m", hidden=256, heads=4, layers=4, seq_len=128, vocab=50432)
    fsdp = build_stage_plans(model, TrainingSpec(micro_batch=1, micro_batches=2, precision="bf16", recompute="none",
                                                 framework="hf", zero_stage=3), Parallelism(dp=2))[0]
    assert fsdp.runtime == "fsdp2"
    prof = _Profile("overlapped")
    prof.host_overhead = {"fsdp2": {"per_layer_s": 0.003, "per_iteration_s": 0.0, "overlap": "overlapped"}}
    f = host_fields(prof, fsdp, fwd_s=0.002, bwd_s=0.004, mp_fwd=0.0, mp_bwd=0.0, update_s=0.0, notes=[])
    assert f["host_fwd_s"] == pytest.approx(0.012 * HOST_FORWARD_SHARE["fsdp2"])
    assert f["host_fwd_s"] + f["host_bwd_s"] == pytest.approx(0.012)
    # 5.04 ms of forward issue against 2 ms of forward GPU work, 6.96 against 4 in the backward: both excesses show
    assert f["host_fwd_extra_s"] == pytest.approx(0.012 * 0.42 - 0.002)
    assert f["host_bwd_extra_s"] == pytest.approx(0.012 * 0.58 - 0.004)
