"""What a run says about FSDP2: the note on its host excess and its waits for collectives, both
counted (sim/costs.py, ``_fsdp_overlap_note``; docs/multi_gpu.md, "FSDP2's host and collectives,
counted twice"), and its in-step collectives as the step's work, not a pipeline bubble."""

import re

import pytest

from trainsim.scenarios.compare_multi import scenario_mapping
from trainsim.scenarios.compose import predict, scenario_simulator
from trainsim.scenarios.schema import scenario_from_mapping
from trainsim.sim.exposed import FSDP_OVERLAP_NOTE_SHARE, fsdp_host_overlap

# two shapes of validation/hf_parallel_shapes_unseen10.csv (machine CQ measured them): s01 at micro-batch 1,
# where FSDP2's host and its gathers both exceed the compute; s05 at micro-batch 8, where the GPU paces
HOST_HEAVY = {"name": "s01", "hidden": "3584", "heads": "28", "layers": "7", "seq_len": "512",
              "micro_batch": "1", "micro_batches": "4"}
GPU_BOUND = {"name": "s05", "hidden": "3840", "heads": "60", "layers": "7", "seq_len": "2048",
             "micro_batch": "8", "micro_batches": "1"}
NOTE = re.compile(r"FSDP2 \(stage (\d+)\): the host's excess over the compute \(([\d.]+) ms a micro-batch\) and the "
                  r"collectives and copies the GPU waits for \(([\d.]+) ms\) are added.*: (\d+) % of the micro-batch's "
                  r"step is in question")


def _mapping(shape: dict[str, str], layout: str, tp: int = 1, fsdp: int = 2, dp: int = 1) -> dict:
    row = {**shape, "layout": layout, "pp": "1", "tp": str(tp), "dp": str(dp), "fsdp": str(fsdp)}
    return scenario_mapping("hf", row, "h200-sxm-bf16", "hgx-h200")


def _scenario(shape: dict[str, str], layout: str, tp: int = 1, fsdp: int = 2):
    return scenario_from_mapping(_mapping(shape, layout, tp, fsdp))


def _predict(shape: dict[str, str], layout: str, tp: int = 1, fsdp: int = 2):
    return predict(_scenario(shape, layout, tp, fsdp))


def _notes(pred) -> list[tuple[int, float, float, float]]:
    return [(int(m[1]), float(m[2]), float(m[3]), float(m[4]))
            for m in (NOTE.search(w) for w in pred.costs.notes) if m]


def test_the_note_gives_the_stages_own_numbers_where_host_and_gathers_both_exceed_the_compute():
    pred = _predict(HOST_HEAVY, "fsdp2")
    (stage, host_ms, fsdp_ms, pct), = _notes(pred)
    st = pred.costs.stages[stage]
    host, fsdp = st.host_fwd_extra_s + st.host_bwd_extra_s, st.fsdp_fwd_s + st.fsdp_bwd_s
    assert host_ms == pytest.approx(1e3 * host, abs=0.05) and fsdp_ms == pytest.approx(1e3 * fsdp, abs=0.05)
    share = fsdp_host_overlap(host, fsdp, st.fwd_s + st.bwd_s)
    assert pct == round(100 * share) and share >= 0.15  # measured on CQ: 45 % over the sum
    assert share == min(host, fsdp) / (st.fwd_s + st.bwd_s)


def test_no_note_where_the_gpu_paces_or_tensor_parallelism_runs_inside_fsdp2():
    gpu_bound = _predict(GPU_BOUND, "fsdp2")
    assert not _notes(gpu_bound)
    st = gpu_bound.costs.stages[0]
    assert fsdp_host_overlap(st.host_fwd_extra_s + st.host_bwd_extra_s, st.fsdp_fwd_s + st.fsdp_bwd_s,
                             st.fwd_s + st.bwd_s) < FSDP_OVERLAP_NOTE_SHARE
    # FSDP2 x TP: the same host-heavy shape, where the sum was measured centred
    assert not _notes(_predict(HOST_HEAVY, "fsdp2xtp2", tp=2, fsdp=2))


def test_the_overlap_is_the_smaller_claim_over_the_step():
    assert fsdp_host_overlap(0.02, 0.05, 0.2) == pytest.approx(0.1)
    assert fsdp_host_overlap(0.05, 0.02, 0.2) == pytest.approx(0.1)
    assert fsdp_host_overlap(0.0, 0.05, 0.2) == 0.0
    assert fsdp_host_overlap(0.02, 0.05, 0.0) == 0.0


def test_one_stage_has_no_bubble_however_much_of_its_steps_fsdp2_exposes():
    sc = _scenario(HOST_HEAVY, "fsdp2")
    pred = predict(sc)
    sim = scenario_simulator(sc)(pred.costs, sc.cluster, mode="realistic", seed=0)
    m = pred.costs.micro_batches
    st = pred.costs.stages[0]
    # the gathers the steps wait for are a third of the run, and none of it is a bubble (it was 42.7 %)
    assert sim.exposed["dp_allgather"] == pytest.approx(m * (st.fsdp_fwd_s + st.fsdp_bwd_s), rel=1e-9)
    assert sim.exposed["dp_allgather"] > 0.3 * sim.iteration_s
    assert sim.bubble_share == 0.0


def test_predict_says_which_share_of_the_parameters_fsdp_keeps(tmp_path, capsys):
    import yaml

    from trainsim.scenarios.cli import main

    path = tmp_path / "fsdp2.yaml"
    path.write_text(yaml.safe_dump(_mapping(HOST_HEAVY, "fsdp2")))
    assert main(["predict", str(path), "-q"]) == 0
    out = capsys.readouterr().out
    params = _predict(HOST_HEAVY, "fsdp2").costs.stages[0].params
    assert f"{params / 1e6:9.1f} M" in out  # the column: what a rank computes with
    assert f"FSDP keeps 1/2 of them between uses ({params / 2 / 1e6:.1f} M on stage 0)" in out
    path.write_text(yaml.safe_dump(_mapping(HOST_HEAVY, "dp2", fsdp=1, dp=2)))
    assert main(["predict", str(path), "-q"]) == 0
    assert "FSDP keeps" not in capsys.readouterr().out
