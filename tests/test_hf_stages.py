"""framework "hf" under PyTorch-native parallelism: plans, collectives, DDP buckets, memory (hand-computed)."""

from __future__ import annotations

import pytest

from trainsim.operators import ConfigError, ModelSpec, OpKind, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.hf_stages import DDP_BUCKET_BYTES, hf_layer_tensors, hf_stage_layers
from trainsim.operators.memory import memory_per_gpu
from trainsim.operators.ops import Op, features, hf_params
from trainsim.operators.stages import DPBuckets, GradSegment
from trainsim.sim.costs import _ddp_buckets

D, H, L, S, V = 256, 4, 4, 128, 50432
MODEL = ModelSpec("tiny", hidden=D, heads=H, layers=L, seq_len=S, vocab=V)


def _tr(b: int = 2, m: int = 3, zero_stage: int = 0) -> TrainingSpec:
    return TrainingSpec(micro_batch=b, micro_batches=m, precision="bf16", recompute="none", framework="hf",
                        zero_stage=zero_stage)


@pytest.mark.parametrize(("layers", "pp", "expected"), [(8, 2, (4, 4)), (10, 4, (2, 2, 3, 3)), (5, 5, (1,) * 5),
                                                        (7, 1, (7,))])
def test_stage_layers_equal_with_the_remainder_last(layers, pp, expected):
    assert hf_stage_layers(layers, pp) == expected


def test_more_stages_than_layers_is_refused():
    with pytest.raises(ConfigError, match="parallelism.pp"):
        hf_stage_layers(3, 4)


def test_tensor_parallel_collectives_follow_the_dtensor_plan():
    b = 2
    (plan,) = build_stage_plans(MODEL, _tr(b), Parallelism(mp=2))
    bld = b * S * D
    # forward: 2 bf16 row-parallel outputs per layer, the fp32 embedding output, 3 fp32 loss reductions
    assert plan.mp_colls_fwd == ((bld, 2 * L), (2 * bld, 1), (2 * b * S, 3))
    # backward: fp32 gradients of the 2 column-parallel inputs per layer and of the LM head's input
    assert plan.mp_colls_bwd == ((2 * bld, 2 * L + 1),)
    sharded = {oc.op.kind: oc.op.mp for oc in plan.forward}
    assert sharded[OpKind.HF_QKV] == sharded[OpKind.HF_MLP_DOWN] == sharded[OpKind.HF_LM_HEAD] == 2
    assert sharded[OpKind.HF_LAYERNORM] == sharded[OpKind.HF_RESIDUAL] == 1


def test_tensor_parallel_shards_the_parameters():
    (one,) = build_stage_plans(MODEL, _tr(), Parallelism())
    (two,) = build_stage_plans(MODEL, _tr(), Parallelism(mp=2))
    d, f = D, 4 * D
    whole_per_rank = L * (4 * d + d + d) + 2 * d  # norms, dense and MLP-down biases, final norm
    assert one.params == hf_params(Op(OpKind.HF_OPTIMIZER, d=d, v=V, layers=L))
    assert two.params == (one.params - whole_per_rank) // 2 + whole_per_rank
    assert sum(hf_layer_tensors(d, f, 2)) == 4 * d + 3 * d * (d + 1) // 2 + d * d // 2 + d + f * (d + 1) // 2 \
        + d * f // 2 + d


def test_tensor_parallel_features_are_one_ranks_shard():
    full = Op(OpKind.HF_MLP_UP, b=2, l=S, d=D, h=H)
    half = Op(OpKind.HF_MLP_UP, b=2, l=S, d=D, h=H, mp=2)
    assert features(half)[2] == features(full)[2] / 2 and features(half)[3] == features(full)[3] / 2
    assert features(Op(OpKind.HF_DENSE, b=2, l=S, d=D, h=H, mp=4))[1] == D / 4


def test_pipeline_stages_hold_their_own_parameters_and_send_fp32():
    b = 2
    first, last = build_stage_plans(MODEL, _tr(b), Parallelism(pp=2))
    assert (first.encoders, last.encoders) == (2, 2)
    kinds_first = {oc.op.kind for oc in first.forward}
    kinds_last = {oc.op.kind for oc in last.forward}
    assert OpKind.HF_EMBEDDING in kinds_first and OpKind.HF_LM_HEAD not in kinds_first
    assert OpKind.HF_LM_HEAD in kinds_last and OpKind.HF_EMBEDDING not in kinds_last
    assert first.p2p_entries == 2 * b * S * D  # the fp32 residual stream, in 2-byte entries
    layer = sum(hf_layer_tensors(D, 4 * D, 1))
    assert first.params == 2 * layer + V * D and last.params == 2 * layer + V * D + 2 * D
    assert first.params + last.params == build_stage_plans(MODEL, _tr(b), Parallelism())[0].params
    # m - 1 accumulations, plus the schedule's division of every gradient by m
    assert first.grad_accum_count == 3


def test_segments_cover_the_parameters_in_backward_order():
    for par in (Parallelism(), Parallelism(mp=2), Parallelism(pp=2), Parallelism(dp=2)):
        for plan in build_stage_plans(MODEL, _tr(), par):
            assert sum(g.params for g in plan.grad_segments) == plan.params
    (plan,) = build_stage_plans(MODEL, _tr(), Parallelism(dp=2))
    kinds = [{oc.op.kind for oc in g.ops} for g in plan.grad_segments]
    assert OpKind.HF_LM_HEAD in kinds[0] and OpKind.HF_EMBEDDING in kinds[-1]
    # m - 1, plus DDP's two bucket copies: 8 bytes per parameter each, against the accumulation's 12
    assert plan.grad_accum_count == pytest.approx(2 + 16 / 12)


def test_ddp_buckets_close_at_their_cap_and_never_split_a_tensor():
    caps = DPBuckets(first_entries=10, entries=25, entries_per_param=2)
    segs = [GradSegment((3, 4), ()), GradSegment((20,), ()), GradSegment((2, 2, 2), ()), GradSegment((1,), ())]
    # entries: 6, 8 -> 14 >= 10 closes bucket 0 in segment 0; 40 >= 25 closes bucket 1 alone (segment 1);
    # 4 + 4 + 4 = 12, + 2 = 14 < 25: the rest is the last bucket, complete with segment 3
    assert _ddp_buckets(segs, caps) == [(14, 0), (40, 1), (14, 3)]


def test_ddp_default_caps():
    (plan,) = build_stage_plans(MODEL, _tr(), Parallelism(dp=2))
    assert plan.dp_buckets == DPBuckets(2**19, DDP_BUCKET_BYTES // 2, 2)


def test_interleaved_schedule_is_refused_for_hf():
    with pytest.raises(ConfigError, match="parallelism.schedule"):
        build_stage_plans(MODEL, _tr(), Parallelism(pp=2, schedule="interleaved-1f1b", virtual_stages=2))


def test_memory_shrinks_with_tensor_and_pipeline_parallelism_and_ddp_adds_its_copies():
    tr = _tr(b=4, m=4)

    def mem(par):
        return memory_per_gpu(MODEL, tr, par, build_stage_plans(MODEL, tr, par)).total

    one = mem(Parallelism())
    assert mem(Parallelism(mp=2)) < one and mem(Parallelism(pp=2)) < one
    (plan,) = build_stage_plans(MODEL, tr, Parallelism(dp=2))
    # the bucket, and the rebuilt bucket beside it in the second iteration: +8 bytes per parameter
    assert mem(Parallelism(dp=2)) == pytest.approx(one + 8.0 * plan.params)
    # the same at one micro-batch (measured on 2 H200s, validation/ddp_memory_h200_2gpu_machineB{Y,Z}/),
    # where the gradients of one GPU are not live at its peak (the start of the only backward)
    tr1 = _tr(b=4, m=1)
    (p1,) = build_stage_plans(MODEL, tr1, Parallelism(dp=2))
    single = memory_per_gpu(MODEL, tr1, Parallelism(), build_stage_plans(MODEL, tr1, Parallelism())).total
    assert memory_per_gpu(MODEL, tr1, Parallelism(dp=2), p1).total == pytest.approx(single + 8.0 * p1.params)


def test_ddp_buckets_are_all_reduced_while_the_last_backward_runs():
    import trainsim

    sc = trainsim.load_scenario("gptneox-h100", overrides={
        "parallelism.dp": 2, "cluster.preset": "dgx-h100", "cluster.gpus_per_node": 2,
        "profile.name": "roofline:h100-sxm", "simulation.mode": "realistic"})
    res = trainsim.simulate(sc, record=True)
    spans = res.result.spans
    last_bwd_end = max(s.end_s for s in spans if s.cat == "backward")
    buckets = sorted((s for s in spans if s.cat == "dp_allreduce" and s.name.startswith("all-reduce bucket")),
                     key=lambda s: s.start_s)
    assert len(buckets) > 3
    assert buckets[0].start_s < last_bwd_end  # overlapped: DDP hooks fire as gradients are complete
    assert buckets[-1].start_s >= last_bwd_end - 1e-12  # the embedding's bucket is last, after the backward
    for a, b in zip(buckets, buckets[1:], strict=False):  # one stream: a bucket starts once the previous one ended
        assert b.start_s >= a.end_s - 1e-12


def test_fsdp_shards_every_unit_and_drops_the_ddp_buckets():
    (plan,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=4))
    layer = sum(hf_layer_tensors(D, 4 * D, 1))
    assert plan.fsdp is not None and plan.dp_buckets is None and plan.runtime == "fsdp2"
    assert plan.fsdp.layer_shard == 2 * layer // 4  # fp32: 2 entries per parameter, a quarter per rank
    assert plan.fsdp.root_shard == 2 * (2 * V * D + 2 * D) // 4
    assert plan.grad_accum_count == 2  # m - 1; no DDP bucket copies
    assert plan.optimizer.mp == 4  # the optimizer steps a quarter of the parameters


def test_fsdp_over_one_rank_is_refused_in_one_line():
    import subprocess
    import sys

    with pytest.raises(ConfigError, match="parallelism.dp > 1"):
        build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(mp=2))
    r = subprocess.run([sys.executable, "-m", "trainsim", "predict", "gptneox-h100", "--set", "training.zero_stage=3",
                        "--set", "profile.name=roofline:h100-sxm"], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "training.zero_stage" in r.stderr


def test_zero_stages_and_fsdp_options_are_checked():
    assert TrainingSpec(zero_stage=3).fsdp_sharded and TrainingSpec(fsdp=True).zero_stage == 3
    assert TrainingSpec(zero_stage=2).reduce_scatters_grads and not TrainingSpec(zero_stage=1).reduce_scatters_grads
    with pytest.raises(ConfigError, match="training.fsdp"):
        TrainingSpec(fsdp=True, zero_stage=2)
    with pytest.raises(ConfigError, match="training.zero_stage"):
        TrainingSpec(zero_stage=2, framework="hf")  # PyTorch-native runs DDP or FSDP2
    with pytest.raises(ConfigError, match="training.zero_stage"):
        TrainingSpec(zero_stage=4)


def test_fsdp_exposed_communication_by_hand():
    from trainsim.sim.exposed import fsdp_exposed

    (plan,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=2))
    seg = [g for g in plan.grad_segments if g.layer][0]
    head = plan.grad_segments[0]
    fwd = {oc.op: 1e-3 for g in plan.grad_segments for oc in (*g.ops, *g.recompute)}
    bwd = {op: 2e-3 for op in fwd}
    c_f = sum(oc.count for oc in seg.ops) * 1e-3
    c_b = sum(oc.count for oc in seg.ops) * 2e-3
    c_head = sum(oc.count for oc in head.ops) * 2e-3
    ag, rs, ag_root, rs_root = 0.5 * c_f, 0.8 * c_b, 3e-3, 4e-3
    assert ag < c_head and ag + rs > c_b  # the head's backward hides the first gather; the queue shows
    f, b = fsdp_exposed(plan, ag, rs, ag_root, rs_root, fwd, bwd)
    assert f == pytest.approx(ag_root + ag)  # the other layers' gathers hide behind compute
    assert b == pytest.approx((L - 1) * (ag + rs - c_b) + rs + rs_root)
    slow = 2 * c_f  # gathers slower than a layer's forward show their excess on every layer
    f2, _ = fsdp_exposed(plan, slow, rs, ag_root, rs_root, fwd, bwd)
    assert f2 == pytest.approx(ag_root + slow + (L - 1) * (slow - c_f))


def test_fsdp_interference_slows_what_overlaps_by_hand():
    from trainsim.sim.exposed import fsdp_exposed

    (plan,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=2))
    seg = [g for g in plan.grad_segments if g.layer][0]
    fwd = {oc.op: 1e-3 for g in plan.grad_segments for oc in (*g.ops, *g.recompute)}
    bwd = {op: 2e-3 for op in fwd}
    c_f = sum(oc.count for oc in seg.ops) * 1e-3
    ag, rs, ag_root, rs_root = 0.5 * c_f, 1e-4, 3e-3, 4e-3
    # compute at 1/1.25 of its speed while a gather runs, gathers 1.5x slower: the gather (1.5 ag
    # = 0.75 c_f) ends first and costs its layer 1.5 ag (1 - 1/1.25) = 0.3 ag; the first layer's
    # and the root's run alone
    f, _ = fsdp_exposed(plan, ag, rs, ag_root, rs_root, fwd, bwd, (1.25, 1.0, 1.5))
    assert f == pytest.approx(ag_root + ag + (L - 1) * 0.3 * ag)
    # gathers 3x slower (1.5 c_f): the compute ends first, at 1.25 c_f, having moved 1.25 c_f / 3 of
    # the gather's work; the rest, ag - 1.25 c_f / 3, runs alone: the layer ends at
    # 1.25 c_f + 0.5 c_f - 1.25 c_f / 3, i.e. c_f (0.75 - 1/3 + 1.25 - 1) = 0.6667 c_f beyond c_f
    f2, _ = fsdp_exposed(plan, ag, rs, ag_root, rs_root, fwd, bwd, (1.25, 1.0, 3.0))
    beyond = 1.25 * c_f + (ag - 1.25 * c_f / 3) - c_f
    assert beyond == pytest.approx(c_f * (0.25 + 0.5 - 1.25 / 3))
    assert f2 == pytest.approx(ag_root + ag + (L - 1) * beyond)
    assert fsdp_exposed(plan, ag, rs, ag_root, rs_root, fwd, bwd, (1.0, 1.0, 1.0)) == \
        fsdp_exposed(plan, ag, rs, ag_root, rs_root, fwd, bwd)


def test_fsdp_copies_move_eight_bytes_per_parameter_at_the_accumulation_rate():
    from trainsim.operators.ops import hf_params
    from trainsim.sim.exposed import fsdp_copies, fsdp_full_pass

    (plan,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=2))
    full = fsdp_full_pass(plan)
    assert plan.grad_accum is not None and full.mp == plan.grad_accum.mp // 2  # the unsharded parameters
    per_byte = 0.012 / (12 * hf_params(full))  # a 12 ms pass over them
    notes: list[str] = []
    cp = fsdp_copies(plan, 0.012, object(), notes)  # no measured copies
    layer, layer_in, root, root_in = cp.out_layer, cp.cat_layer, cp.out_root, cp.cat_root
    u = plan.fsdp
    assert layer == layer_in and root == root_in and not notes
    assert cp.gather_in_layer == cp.gather_in_root == 0.0  # not charged without measured copies
    assert layer == pytest.approx(8 * (u.layer_shard * 2 / 2) * per_byte)
    assert root == pytest.approx(8 * (u.root_shard * 2 / 2) * per_byte)
    # the stage's copy bytes (layers and root, one copy each) are 8 of the pass's 12 bytes per parameter
    assert (L * layer + root) == pytest.approx(0.012 * 8 / 12, rel=0.02)


def test_fsdp_copies_from_the_measured_kernels():
    # a profile with measured copies prices each copy from its own curve: a constant rate of 2 and
    # 1 TB/s here, so the layer's 8 bytes per parameter take bytes / rate; a size outside the
    # measured ones, or an unmeasured world, is priced at the edge rate and says so
    from types import SimpleNamespace

    from trainsim.calibration.fsdp_copies import FSDPCopyRates
    from trainsim.sim.exposed import fsdp_copies

    (plan,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=2))
    u = plan.fsdp
    layer_bytes, root_bytes = 8 * u.layer_shard, 8 * u.root_shard  # shard x 2 ranks / 2 entries x 8 bytes
    sizes = (layer_bytes // 2, 4 * root_bytes)
    rates = FSDPCopyRates({("copy_out", 2): tuple((b, b / 2e12) for b in sizes),
                           ("chunk_cat", 2): tuple((b, b / 1e12) for b in sizes),
                           ("copy_in", 2): tuple((b, b / 4e12) for b in (sizes[0] // 2, sizes[1]))})
    notes: list[str] = []
    cp = fsdp_copies(plan, 0.012, SimpleNamespace(name="p", fsdp_copies=rates), notes)
    assert (cp.out_layer, cp.cat_layer) == (pytest.approx(layer_bytes / 2e12), pytest.approx(layer_bytes / 1e12))
    assert (cp.out_root, cp.cat_root) == (pytest.approx(root_bytes / 2e12), pytest.approx(root_bytes / 1e12))
    # the gather's copy-in moves the rank's shard, 1/2 of the unit's bytes here
    assert (cp.gather_in_layer, cp.gather_in_root) == (pytest.approx(layer_bytes / 2 / 4e12),
                                                       pytest.approx(root_bytes / 2 / 4e12))
    assert notes == []
    (plan4,) = build_stage_plans(MODEL, _tr(zero_stage=3), Parallelism(dp=4))
    fsdp_copies(plan4, 0.012, SimpleNamespace(name="p", fsdp_copies=rates), notes)
    assert len(notes) == 1 and "over 4 ranks are outside its measured copies" in notes[0]


def test_fsdp_copies_run_on_the_compute_stream(monkeypatch):
    # torch >= 2.6: FSDP2's reduce-scatter copy-in (chunk_cat) runs on the current stream before the
    # reduce-scatter stream waits for it, like the gathers' copy-outs. Copy-outs of c per layer and r
    # for the root and copy-ins of c' and r' add exactly L c + r to the forward and L (c + c') + r' to
    # the backward (the re-gathers' copy-outs and the copy-ins), nothing to what the collectives expose.
    from trainsim.calibration.roofline import RooflineProfile
    from trainsim.sim import costs as sim_costs
    from trainsim.topology import get_cluster
    from trainsim.topology.cluster import cluster_from_mapping

    tr, par = _tr(zero_stage=3), Parallelism(dp=2)
    plans = build_stage_plans(MODEL, tr, par)
    cluster = cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": 2})
    prof = RooflineProfile("r", get_cluster("hgx-h100").gpu.peak_flops, 3e12)

    def stage(c: float, c_in: float, r: float, r_in: float, g: float = 0.0, g_root: float = 0.0):
        monkeypatch.setattr(sim_costs, "fsdp_copies",
                            lambda plan, full_pass_s, model, notes: sim_costs.FSDPCopies(c, c_in, r, r_in, g, g_root))
        return sim_costs.build_costs(plans, tr, par, cluster, prof).stages[0]

    none, some = stage(0.0, 0.0, 0.0, 0.0), stage(1e-3, 2e-3, 3e-3, 5e-3)
    assert some.fsdp_fwd_s - none.fsdp_fwd_s == pytest.approx(L * 1e-3 + 3e-3)
    assert some.fsdp_bwd_s - none.fsdp_bwd_s == pytest.approx(L * (1e-3 + 2e-3) + 5e-3)
    # the all-gather's copy-in runs before it on its stream: the root's gather, which nothing hides,
    # shows it whole in the forward; the layers' gathers only where they outlast the compute
    gathered = stage(0.0, 0.0, 0.0, 0.0, 0.0, 7e-3)
    assert gathered.fsdp_fwd_s - none.fsdp_fwd_s == pytest.approx(7e-3)
    assert gathered.fsdp_bwd_s == pytest.approx(none.fsdp_bwd_s)  # the root stays gathered after the forward


def test_one_micro_batchs_peak_holds_the_weights_casts_or_the_gradients_not_both():
    # w10 of validation/configs_unseen7.csv (d4224, 8 layers, sequence 512, b1, full recompute): the
    # gradients (4 bytes a parameter) outweigh what the backward frees (the kept activations and
    # autocast's bf16 copies of the linears' weights, which the saved tensors hold until then), so the
    # peak is the fp32 weights, gradients and Adam's two states: 16 bytes a parameter (measured 31.95
    # GiB on two H200s; 35.47 GiB predicted when the copies were counted beside the gradients)
    from trainsim.operators.memory import memory_per_gpu

    big = ModelSpec("w10", hidden=4224, heads=33, layers=8, seq_len=512, vocab=V)
    tr = TrainingSpec(micro_batch=1, micro_batches=1, precision="bf16", recompute="full", framework="hf")
    (plan,) = build_stage_plans(big, tr, Parallelism())
    est = memory_per_gpu(big, tr, Parallelism(), (plan,))
    assert est.total == pytest.approx(16.0 * plan.params)
    assert est.total_gib == pytest.approx(31.88, abs=0.01)


def test_fsdp_memory_is_a_shard_plus_the_live_units():
    from trainsim.operators.memory import HF_LOSS_BYTES, _linear_params
    from trainsim.operators.partition import padded_vocab

    tr = _tr(b=4, m=4, zero_stage=3)
    ddp_tr = _tr(b=4, m=4)
    par = Parallelism(dp=4)
    (p,) = build_stage_plans(MODEL, tr, par)
    fsdp = memory_per_gpu(MODEL, tr, par, (p,))
    ddp = memory_per_gpu(MODEL, ddp_tr, par, build_stage_plans(MODEL, ddp_tr, par))
    assert fsdp.optimizer == pytest.approx(ddp.optimizer / 4)
    assert fsdp.total < ddp.total
    # by hand: 16 bytes a parameter over the 4 ranks, the root gathered (fp32), every layer's bf16 copies
    # (autocast's, held by the linears until their backward), and the larger of the two moments: the
    # loss's backward (the head's bf16 copy, the last layer gathered, every activation with the logits)
    # and a layer's backward (two layers gathered and the layer's unsharded gradient, the head's fp32
    # gradient, no logits)
    u, v = p.fsdp, padded_vocab(V, 1)
    layer_b, root_b = 2.0 * u.layer_shard * u.ranks, 2.0 * u.root_shard * u.ranks
    head = float(v * D)
    logits = HF_LOSS_BYTES * 4 * S * v
    at_loss = 2.0 * head + layer_b + fsdp.activations
    at_layer = 3.0 * layer_b + 4.0 * head + fsdp.activations - logits
    shared = 16.0 * p.params / 4 + root_b + 2.0 * _linear_params(MODEL, L, v, 1, False)
    assert fsdp.total == pytest.approx(shared + max(at_loss, at_layer), rel=1e-12)
    assert fsdp.not_together == pytest.approx(min(2.0 * layer_b + 4.0 * head, 2.0 * head + logits), rel=1e-12)
    # one micro-batch: each layer's sharded gradient appears only as its reduce-scatter ends, so neither
    # moment has any (fp32, 1/dp of the parameters), however few the activations
    tr1 = _tr(b=4, m=1, zero_stage=3)
    (p1,) = build_stage_plans(MODEL, tr1, par)
    one = memory_per_gpu(MODEL, tr1, par, (p1,))
    assert one.total == pytest.approx(shared + max(at_loss, at_layer) - 4.0 * p1.params / 4, rel=1e-12)
    assert one.total == pytest.approx(one.weights + one.grads + one.optimizer + one.activations - one.not_together)
