"""Compute-communication interference in the simulation: DP buckets that overlap the last backward."""

from __future__ import annotations

import dataclasses

import pytest

from trainsim.calibration.interference import InterferenceModel
from trainsim.calibration.roofline import RooflineProfile
from trainsim.operators import ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.sim.compare import compare
from trainsim.sim.costs import build_costs
from trainsim.sim.engine import simulate
from trainsim.sim.options import REALISTIC
from trainsim.topology.cluster import cluster_from_mapping

MODEL = ModelSpec("m", hidden=1024, heads=16, layers=12, seq_len=2048, vocab=50432)
TR = TrainingSpec(micro_batch=4, micro_batches=2, precision="bf16", recompute="none", framework="hf", zero_stage=0)
PAR = Parallelism(dp=2)
CLUSTER = cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": 2})


def _model(compute: float, collective: float) -> InterferenceModel:
    return InterferenceModel.from_dict({"format": "trainsim-interference/1",
                                        "compute": {"gemm": compute, "attention": compute, "memory": compute},
                                        "collective": {"all": collective, "gemm": collective,
                                                       "attention": collective, "memory": collective}})


def _costs(im: InterferenceModel | None):
    prof = RooflineProfile("r", CLUSTER.gpu.peak_flops, CLUSTER.gpu.mem_bw)
    prof.interference = im
    return build_costs(build_stage_plans(MODEL, TR, PAR), TR, PAR, CLUSTER, prof)


def test_factors_come_from_the_profile():
    st = _costs(_model(1.25, 3.0)).stages[0]
    assert st.interference_compute == pytest.approx(1.25) and st.interference_dp == pytest.approx(3.0)
    none = _costs(None).stages[0]
    assert none.interference_compute == 1.0 and none.interference_dp == 1.0


def test_overlap_slows_both_and_compare_attributes_it():
    costs = _costs(_model(1.25, 3.0))
    on = simulate(costs, CLUSTER, seed=0, options=REALISTIC)
    off = simulate(costs, CLUSTER, seed=0, options=dataclasses.replace(REALISTIC, interference=False))
    assert on.iteration_s > off.iteration_s
    # the backward pays for the overlap: its compute grows by at most what the slowed buckets could take
    st = costs.stages[0]
    max_loss = 3.0 * sum(st.dp_bucket_s) * (1 - 1 / 1.25)
    assert 0 < on.breakdown["compute"] - off.breakdown["compute"] <= max_loss + 1e-12
    c = compare(costs, CLUSTER, seed=0)
    assert c.attribution["interference"] == pytest.approx(on.iteration_s - off.iteration_s, rel=1e-9, abs=1e-15)
    assert sum(c.attribution.values()) == pytest.approx(c.sim_s - c.eq7_s, rel=1e-9, abs=1e-12)


def test_neutral_factors_change_nothing():
    costs = _costs(_model(1.0, 1.0))
    on = simulate(costs, CLUSTER, seed=0, options=REALISTIC)
    off = simulate(costs, CLUSTER, seed=0, options=dataclasses.replace(REALISTIC, interference=False))
    assert on.iteration_s == off.iteration_s


def test_closed_form_interference_is_carried_per_stage():
    # FSDP2 (zero_stage 3) and a CP ring price their overlap in closed form: the stage cost says how
    # much the measured factors added per micro-batch, and nothing without them
    flash = dataclasses.replace(MODEL, attention="flash")
    for model, tr, par in ((MODEL, dataclasses.replace(TR, zero_stage=3), Parallelism(dp=2)),
                           (flash, dataclasses.replace(TR, framework="megatron"), Parallelism(cp=2))):
        plans = build_stage_plans(model, tr, par)
        prof = RooflineProfile("r", CLUSTER.gpu.peak_flops, CLUSTER.gpu.mem_bw)
        prof.interference = _model(1.25, 3.0)
        slow = build_costs(plans, tr, par, CLUSTER, prof).stages[0]
        prof.interference = None
        plain = build_costs(plans, tr, par, CLUSTER, prof).stages[0]
        assert plain.interference_in_steps_s == 0.0
        exposed = (slow.fsdp_fwd_s + slow.fsdp_bwd_s + slow.cp_fwd_s + slow.cp_bwd_s
                   - plain.fsdp_fwd_s - plain.fsdp_bwd_s - plain.cp_fwd_s - plain.cp_bwd_s)
        assert slow.interference_in_steps_s == pytest.approx(exposed, rel=1e-12) and exposed > 0
