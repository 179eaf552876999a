"""Issue 10's options: Megatron's split, sequence and context parallelism, ZeRO-2/3 and the
distributed optimizer, selective recompute, FP8 and interleaving in Eq. 7 (hand-computed cases
and properties)."""

from __future__ import annotations

import dataclasses

import pytest

from trainsim.calibration.roofline import RooflineProfile
from trainsim.operators import (
    MODEL_PRESETS,
    CollKind,
    ConfigError,
    Direction,
    ModelSpec,
    OpKind,
    Parallelism,
    TrainingSpec,
    build_stage_plans,
    split_encoders,
)
from trainsim.operators.ops import flops
from trainsim.sim.costs import build_costs
from trainsim.sim.eq7 import eq7
from trainsim.topology import CLUSTER_PRESETS, Placement, closed_form_seconds, cluster_from_mapping
from trainsim.topology.graph import LinkModel

H100 = CLUSTER_PRESETS["dgx-h100"]
ROOF = RooflineProfile("roof", H100.gpu.peak_flops, H100.gpu.mem_bw)
LLAMA = MODEL_PRESETS["llama3-8b"]  # 32 layers, d 4096, 32 heads, 8 kv heads, SwiGLU 14336, seq 8192
TR = TrainingSpec(micro_batch=1, micro_batches=8, precision="bf16", recompute="none", zero_stage=0)


def node(gpus: int):
    """A DGX H100 node, or a smaller HGX one for layouts of fewer than 8 GPUs."""
    return H100 if gpus >= 8 else cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": gpus})


def costs(model=LLAMA, training=TR, **par):
    p = Parallelism(**par)
    return build_costs(build_stage_plans(model, training, p), training, p, node(p.gpus), ROOF)


# -- Megatron's split -------------------------------------------------------------------------------

def test_megatron_split_of_published_layouts():
    assert split_encoders(105, Parallelism(pp=35, split="megatron")) == (3,) * 35
    assert split_encoders(128, Parallelism(pp=64, split="megatron")) == (2,) * 64
    # Llama 3 405B: one layer fewer on the first and the last of 16 stages
    assert split_encoders(126, Parallelism(pp=16, split="megatron", first_stage_layers=7,
                                           last_stage_layers=7)) == (7,) + (8,) * 14 + (7,)
    assert split_encoders(10, Parallelism(pp=3, split="megatron", first_stage_layers=2)) == (2, 4, 4)
    # the paper's DeepSpeed rule refuses 35 stages for 105 encoders (a stage would get none)
    with pytest.raises(ConfigError, match="parallelism.pp"):
        split_encoders(105, Parallelism(pp=35))


@pytest.mark.parametrize("par,field", [
    (Parallelism(pp=4, split="megatron"), "parallelism.pp"),  # 10 layers over 4 stages
    (Parallelism(pp=2, split="megatron", first_stage_layers=6, last_stage_layers=6), "parallelism.first_stage_layers"),
    (Parallelism(pp=3, split="megatron", first_stage_layers=10), "parallelism.pp"),  # nothing left for 2 stages
    (Parallelism(pp=2, split="megatron", schedule="interleaved-1f1b", virtual_stages=2), "parallelism.virtual_stages"),
])
def test_impossible_megatron_splits_say_why(par, field):
    with pytest.raises(ConfigError) as e:
        split_encoders(10, par)
    assert e.value.field == field


def test_first_stage_layers_need_the_megatron_split():
    with pytest.raises(ConfigError, match="parallelism.first_stage_layers"):
        Parallelism(pp=2, first_stage_layers=3)


# -- sequence parallelism -----------------------------------------------------------------------------

def test_sequence_parallel_syncs_are_reduce_scatter_plus_all_gather_of_shards():
    plain, sp = costs(pp=1, mp=8, dp=1), costs(pp=1, mp=8, dp=1, sequence_parallel=True)
    entries = 1 * 8192 * 4096  # b * l * d
    shard = CollKindShard = entries // 8
    rs = closed_form_seconds(_coll(CollKind.REDUCE_SCATTER, CollKindShard), H100)
    ag = closed_form_seconds(_coll(CollKind.ALL_GATHER, shard), H100)
    assert sp.stages[0].mp_allreduce_s == pytest.approx(rs + ag, rel=1e-12)
    assert plain.stages[0].mp_allreduce_s == pytest.approx(
        closed_form_seconds(_coll(CollKind.ALL_REDUCE, entries), H100), rel=1e-12)
    assert sp.stages[0].mp_fwd_count == plain.stages[0].mp_fwd_count  # one RS + AG per all-reduce


def _coll(kind, entries):
    from trainsim.operators import Collective

    return Collective(kind, entries, 1, 8)


def test_sequence_parallel_moves_what_the_all_reduce_moves():
    """Korthikanti et al.: a reduce-scatter plus an all-gather of the 1/t shards load every link as
    the all-reduce of the whole buffer does (2 (t-1)/t of it per rank)."""
    par = Parallelism(mp=8)
    lm = LinkModel(H100, Placement(par, 8))
    group = tuple(range(8))
    buffer = 8.0 * 2**20
    ar = lm.loads(CollKind.ALL_REDUCE, group)
    rs, ag = lm.loads(CollKind.REDUCE_SCATTER, group), lm.loads(CollKind.ALL_GATHER, group)
    for link, w in ar.items():
        assert (rs[link] + ag[link]) * buffer / 8 == pytest.approx(w * buffer, rel=1e-12)
        assert w * buffer == pytest.approx(2 * 7 / 8 * buffer, rel=1e-12)


def test_sequence_parallel_never_changes_model_flops():
    for mp in (2, 4, 8):
        a = build_stage_plans(LLAMA, TR, Parallelism(pp=2, mp=mp))
        b = build_stage_plans(LLAMA, TR, Parallelism(pp=2, mp=mp, sequence_parallel=True))
        for pa, pb in zip(a, b, strict=True):
            assert pa.flops() == pytest.approx(pb.flops(), rel=1e-12)
        # and the norms really run on 1/mp of the sequence
        norms = [oc.op for oc in b[0].forward if oc.op.kind is OpKind.RMSNORM]
        assert norms and all(o.l == LLAMA.seq_len // mp for o in norms)


def test_model_flops_do_not_depend_on_the_layout():
    model = dataclasses.replace(LLAMA, vocab=128_000)  # no vocabulary padding at any mp (a real extra)
    tot = []
    for par in (Parallelism(), Parallelism(mp=8), Parallelism(pp=4, mp=2), Parallelism(mp=4, cp=2),
                Parallelism(mp=2, cp=4, sequence_parallel=True)):
        plans = build_stage_plans(model, TR, par)
        tot.append(sum(sum(p.flops()) for p in plans) * par.mp * par.cp)
    assert all(t == pytest.approx(tot[0], rel=1e-12) for t in tot)


# -- context parallelism -----------------------------------------------------------------------------

def test_context_parallel_divides_attention_work_by_cp():
    (one,) = build_stage_plans(LLAMA, TR, Parallelism())
    for cp in (2, 4, 8):
        (ring,) = build_stage_plans(LLAMA, TR, Parallelism(cp=cp))
        att = [sum(oc.count * flops(oc.op, Direction.FWD) for oc in p.forward if oc.op.kind is OpKind.FLASH_ATTN)
               for p in (one, ring)]
        assert att[1] == pytest.approx(att[0] / cp, rel=1e-12)
        assert sum(ring.flops()) == pytest.approx(sum(one.flops()) / cp, rel=1e-12)


def test_context_parallel_ring_volume_is_the_published_one():
    """Each rank sends cp - 1 chunks of its K and V per layer in the forward: (cp - 1)/cp of the
    sequence's keys and values for its kv heads (Megatron-Core / Transformer Engine P2P ring)."""
    cp, mp = 4, 2
    (plan,) = build_stage_plans(LLAMA, TR, Parallelism(mp=mp, cp=cp))
    ring = plan.cp_ring
    assert ring is not None and ring.ranks == cp and ring.layers == LLAMA.layers
    kv_per_rank = LLAMA.kv_heads // mp * LLAMA.head_dim
    whole = 2 * 1 * LLAMA.seq_len * kv_per_rank  # K and V of the whole sequence, one MP rank
    assert (cp - 1) * ring.kv_entries == (cp - 1) * whole // cp


def test_context_parallel_exposes_only_what_the_attention_does_not_hide():
    c = costs(pp=1, mp=1, dp=1, cp=2).stages[0]
    # one chunk of K/V over NVLink is far shorter than the attention on a 4,096-token chunk
    assert c.cp_send_s > 0 and c.cp_fwd_s == 0.0 and c.cp_ring_s > 0
    two = node(2)
    slow = dataclasses.replace(two, nvlink_bw=two.nvlink_bw / 1e4)
    p = Parallelism(cp=2)
    c2 = build_costs(build_stage_plans(LLAMA, TR, p), TR, p, slow, ROOF).stages[0]
    layers = LLAMA.layers
    assert c2.cp_fwd_s == pytest.approx(layers * (c2.cp_send_s - _att(c2, p)), rel=1e-9)
    assert c2.fwd_s == pytest.approx(c2.fwd_compute_s + c2.cp_fwd_s, rel=1e-12)


def test_overlap_excess_by_hand():
    from trainsim.sim.exposed import overlap_excess
    assert overlap_excess(1.0, 3.0) == 0.0 and overlap_excess(3.0, 1.0) == 2.0  # no interference: the excess
    # compute at 1/1.25, communication at 1/2 while both run: the send (1 s alone) ends at 2 s, the
    # compute (3 s alone) has done 1.6 s by then and finishes 1.4 s later: 3.4 s, 0.4 s beyond it
    assert overlap_excess(1.0, 3.0, 1.25, 2.0) == pytest.approx(0.4)
    # the send (3 s) outlasts: the compute (1 s) ends at 1.25 s, the send has done 0.625 s and runs
    # its other 2.375 s alone: 3.625 s, 2.625 beyond the compute
    assert overlap_excess(3.0, 1.0, 1.25, 2.0) == pytest.approx(2.625)


def test_context_parallel_ring_pays_the_measured_interference():
    from trainsim.sim.exposed import cp_exposed, overlap_excess
    p = Parallelism(cp=2)
    (plan,) = build_stage_plans(LLAMA, TR, p)
    assert plan.cp_ring is not None
    att = plan.cp_ring.attention
    fwd, bwd = {att: 2e-3}, {att: 5e-3}
    steps = (plan.cp_ring.ranks - 1) * plan.cp_ring.layers
    # sends the attention hides: nothing shows without interference, the attention's slowdown with it
    assert cp_exposed(plan, 0.5e-3, 2e-3, fwd, bwd) == (0.0, 0.0)
    f, b = cp_exposed(plan, 0.5e-3, 2e-3, fwd, bwd, (1.08, 2.9, 1.08, 2.9))
    assert f == pytest.approx(steps * 0.5e-3 * 2.9 * (1 - 1 / 1.08))  # the send, 2.9x slower, ends first
    assert b == pytest.approx(steps * overlap_excess(2e-3, 5e-3, 1.08, 2.9)) and b > 0
    # 1 ms alone hides behind 2 ms of attention, but not at 2.9x beside it: 1 - 2 + 2 x 1.08 (1 - 1/2.9)
    f1, _ = cp_exposed(plan, 1e-3, 2e-3, fwd, bwd, (1.08, 2.9, 1.08, 2.9))
    assert f1 == pytest.approx(steps * (1e-3 - 2e-3 + 2e-3 * 1.08 * (1 - 1 / 2.9)))
    # a send longer than the attention: its excess, and more beside it
    f2, _ = cp_exposed(plan, 4e-3, 2e-3, fwd, bwd, (1.08, 2.9, 1.0, 1.0))
    assert f2 > steps * (4e-3 - 2e-3)


def _att(cost, par):
    (plan,) = build_stage_plans(LLAMA, TR, par)
    assert plan.cp_ring is not None
    return float(ROOF.op_seconds([plan.cp_ring.attention], Direction.FWD)[0])


def test_megatron_rank_order_tp_then_cp_then_dp_then_pp():
    pl = Placement(Parallelism(pp=2, mp=2, dp=2, cp=2), gpus_per_node=8)
    assert pl.rank(0, 0, 1, 0) == 1  # TP fastest
    assert pl.rank(0, 0, 0, 1) == 2  # then CP
    assert pl.rank(0, 1, 0, 0) == 4  # then DP
    assert pl.rank(1, 0, 0, 0) == 8  # then PP
    assert pl.cp_group(0, 1, 1) == (5, 7)
    assert pl.dp_group(0, 1) == (1, 3, 5, 7)  # gradients reduce over DP x CP
    assert pl.mp_span() == (1, 2) and pl.cp_span() == (1, 2) and pl.dp_span() == (1, 4)
    assert all(pl.coords4(pl.rank(s, d, m, c)) == (s, d, m, c)
               for s in range(2) for d in range(2) for m in range(2) for c in range(2))


# -- data parallelism and the optimizer ------------------------------------------------------------------

def test_zero2_and_distributed_optimizer_reduce_scatter_then_all_gather():
    # (training, bytes per reduced gradient): ZeRO-2's 16-bit gradients; the distributed optimizer's
    # fp32 buffer (Megatron-Core's default for bf16) and its bf16 one (grad_reduce_in_fp32: false)
    dist = dataclasses.replace(TR, distributed_optimizer=True)
    for tr, width in ((dataclasses.replace(TR, zero_stage=2), 2), (dist, 4),
                      (dataclasses.replace(dist, grad_reduce_in_fp32=False), 2)):
        st = costs(training=tr, pp=1, mp=8, dp=4).stages[0]
        assert st.dp_reduce_kind is CollKind.REDUCE_SCATTER
        # ZeRO's volume: reduce-scatter + all-gather move what DP's all-reduce moves (2 psi (n-1)/n)
        shards = sum(st.dp_bucket_bytes) / width
        assert shards * 4 == pytest.approx(st.params, abs=4 * len(st.dp_bucket_bytes))
        assert st.dp_allgather_bytes / 2 == st.params // 4
    ar = costs(training=dataclasses.replace(TR, zero_stage=1), pp=1, mp=8, dp=4).stages[0]
    assert ar.dp_reduce_kind is CollKind.ALL_REDUCE and sum(ar.dp_bucket_bytes) / 2 == ar.params


def test_zero3_gathers_every_layer_twice_and_reduce_scatters_once_per_micro_batch():
    tr = dataclasses.replace(TR, zero_stage=1, fsdp=True)
    (plan,) = build_stage_plans(LLAMA, tr, Parallelism(dp=8))
    u = plan.fsdp
    assert u is not None and u.layers == LLAMA.layers and u.ranks == 8
    assert u.layers * u.layer_shard * 8 + u.root_shard * 8 == pytest.approx(plan.params, rel=1e-6)
    st = costs(training=tr, dp=8).stages[0]
    assert st.fsdp_fwd_s > 0 and st.fsdp_bwd_s > 0 and st.dp_allreduce_s == 0


def test_overlap_param_gather_hides_the_gather_behind_the_forward():
    tr = dataclasses.replace(TR, distributed_optimizer=True)
    a = costs(training=tr, mp=8, dp=4).stages[0]
    b = costs(training=dataclasses.replace(tr, overlap_param_gather=True), mp=8, dp=4).stages[0]
    total = a.dp_allgather_s
    assert total > 0 and b.dp_allgather_hidden_s == pytest.approx(min(total, a.fwd_compute_s))
    assert b.dp_allgather_s == pytest.approx(total - b.dp_allgather_hidden_s)


# -- recompute, FP8, SwiGLU ----------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", ["flash", "fused_softmax"])
def test_selective_recompute_costs_between_none_and_full(attention):
    model = dataclasses.replace(LLAMA, attention=attention, seq_len=2048)
    t = {r: costs(model=model, training=dataclasses.replace(TR, recompute=r), mp=2).stages[0].bwd_compute_s
         for r in ("none", "selective", "full")}
    assert t["none"] < t["selective"] < t["full"]


def test_fp8_needs_fp8_samples_and_swaps_the_gemms():
    tr = dataclasses.replace(TR, precision="fp8")
    (plan,) = build_stage_plans(LLAMA, tr, Parallelism(mp=2))
    kinds = {oc.op.kind for oc in plan.forward}
    # the cast is Transformer Engine's fused one: framework megatron in fp8 defaults to training.kernels fused
    assert {OpKind.FP8_LINEAR1, OpKind.FP8_LINEAR4, OpKind.FP8_CAST_FUSED} <= kinds and OpKind.LINEAR1 not in kinds
    assert OpKind.LINEAR_FINAL in kinds  # the LM head stays in bf16
    with pytest.raises(ConfigError, match="no FP8 rate"):
        costs(training=tr, mp=2)


def test_swiglu_has_three_matrices_and_gqa_narrows_qkv():
    (plan,) = build_stage_plans(LLAMA, TR, Parallelism(mp=4))
    ops = {oc.op.kind: oc.op for oc in plan.forward}
    assert ops[OpKind.LINEAR3].ffn == 2 * LLAMA.ffn  # gate and up, fused
    assert ops[OpKind.LINEAR4].ffn == LLAMA.ffn and OpKind.SWIGLU_FUSED in ops and OpKind.GELU not in ops
    assert ops[OpKind.LINEAR1].qkv == 4096 + 2 * 8 * 128  # 32 query heads, 8 kv heads of 128


def test_mp_above_kv_heads_must_say_how_heads_replicate():
    mqa = dataclasses.replace(LLAMA, kv_heads=2)
    with pytest.raises(ConfigError, match="replicate_kv_heads"):
        build_stage_plans(mqa, TR, Parallelism(mp=4))
    (plan,) = build_stage_plans(mqa, TR, Parallelism(mp=4, replicate_kv_heads=True))
    qkv = next(oc.op for oc in plan.forward if oc.op.kind is OpKind.LINEAR1)
    assert qkv.qkv // 4 == 4096 // 4 + 2 * 128  # one replicated kv head per rank


# -- Eq. 7 ------------------------------------------------------------------------------------------------

def test_eq7_interleaved_divides_the_bubble_by_v():
    base = costs(pp=4, mp=2)
    e1 = eq7(base)
    for v in (2, 4):
        c = costs(pp=4, mp=2, schedule="interleaved-1f1b", virtual_stages=v)
        e = eq7(c)
        f_b = e.max_fwd_s + e.max_bwd_s
        assert e.pipeline_s == pytest.approx((8 + 3 / v) * f_b, rel=1e-12)
        assert e.pipeline_s < e1.pipeline_s


def test_bad_model_options_name_their_key():
    for kwargs, key in (({"kv_heads": 3}, "model.kv_heads"), ({"mlp": "reglu"}, "model.mlp"),
                        ({"position": "nope"}, "model.position"), ({"rotary": False, "position": "rope"},
                                                                   "model.position")):
        with pytest.raises(ConfigError) as e:
            ModelSpec("x", hidden=64, heads=8, layers=2, seq_len=16, **kwargs)
        assert e.value.field == key


def test_sweep_searches_cp_and_sequence_parallelism_and_skips_simulating_what_does_not_fit():
    from trainsim.api import load_scenario, sweep

    sc = load_scenario("llama3-8b-dgxh100", ["profile.name=roofline"])
    res = sweep(sc, pp=[1, 2], mp=[1, 2, 4], cp=[1, 2], sequence_parallel=[False, True]).result
    names = {r.layout for r in res.rows} | {s.layout for s in res.skipped}
    assert {"1-2-2-cp2-sp", "1-2-4", "2-4-1"} <= names
    assert not any(n.endswith("-sp") and n.split("-")[1] == "1" for n in names)  # SP over one rank: the same layout
    for r in res.rows:
        assert r.simulated == r.fits_memory
        if not r.simulated:
            assert r.simulated_s == r.eq7_s
    fits = [r.fits_memory for r in res.rows]
    assert fits == sorted(fits, reverse=True)  # layouts that fit first


def test_a_model_without_dropout_keeps_no_masks():
    from trainsim.operators.memory import layer_activations

    with_drop = dataclasses.replace(LLAMA, dropout=True, attention="fused_softmax", seq_len=2048)
    a, b = layer_activations(with_drop, 1, 8), layer_activations(dataclasses.replace(with_drop, dropout=False), 1, 8)
    s, h, heads = 2048, 4096, 32
    assert a.whole - b.whole == 2 * s * h  # two 1-byte masks of h per token
    assert a.scores - b.scores == 3 * heads * s * s / 8  # the scores' mask (1) and dropout output (2)
    assert a.split == b.split


def test_tp_comm_overlap_hides_each_collective_behind_its_gemm():
    from trainsim.operators.ops import OpKind as K

    plain = costs(mp=8, sequence_parallel=True).stages[0]
    over = costs(mp=8, sequence_parallel=True, tp_comm_overlap=True).stages[0]
    (plan,) = build_stage_plans(LLAMA, TR, Parallelism(mp=8, sequence_parallel=True, tp_comm_overlap=True))
    gemms = plan.tp_overlap_gemms
    assert gemms is not None and [g.kind for g in gemms] == [K.LINEAR1, K.LINEAR2, K.LINEAR3, K.LINEAR4]
    t = {g: float(ROOF.op_seconds([g], Direction.FWD)[0]) for g in gemms}
    entries = 1 * 8192 * 4096 // 8
    rs = closed_form_seconds(_coll(CollKind.REDUCE_SCATTER, entries), H100)
    ag = closed_form_seconds(_coll(CollKind.ALL_GATHER, entries), H100)
    qkv, out, up, down = gemms
    per_layer = max(0, ag - t[qkv]) + max(0, rs - t[out]) + max(0, ag - t[up]) + max(0, rs - t[down])
    # the embedding's sync has no GEMM beside it: exposed whole
    assert over.mp_fwd_s == pytest.approx(LLAMA.layers * per_layer + (rs + ag), rel=1e-12)
    assert over.mp_fwd_s < plain.mp_fwd_s
    with pytest.raises(ConfigError, match="parallelism.tp_comm_overlap"):
        Parallelism(mp=8, tp_comm_overlap=True)
