"""Megatron memory options (operators.memory): activation terms (Korthikanti et al. 2022), sequence and
context parallelism, recompute, FP8, ZeRO stages / FSDP, the distributed optimizer, and fit_report."""

from __future__ import annotations

import pytest

from trainsim.operators import MODEL_PRESETS, ModelSpec, Parallelism, TrainingSpec, build_stage_plans
from trainsim.operators.memory import (
    GIB,
    MemoryEstimate,
    fit_report,
    layer_activations,
    megatron_layer_activation_bytes,
    memory_per_gpu,
)
from trainsim.operators.spec import Recompute

# s = 32 tokens, b = 2, h = 64: s*b*h = 4096, s*b = 64 tokens
SMALL = ModelSpec("small", hidden=64, heads=4, layers=4, seq_len=32, vocab=256, attention="flash")
SOFTMAX = ModelSpec("softmax", hidden=64, heads=4, layers=8, seq_len=32, vocab=256, attention="fused_softmax")
# SMALL's parameters on one GPU (Eq. 6): per layer norms 4*64 + qkv 3*64*65 + out 64*65 + up 256*65
# + down 64*257 = 49984; embedding 256*64 = 16384; final norm 128 and head 16384 -> 4*49984 + 32896
LAYER, ROOT = 49984, 32896
PARAMS = 4 * LAYER + ROOT  # 232832


def _mem(model: ModelSpec, par: Parallelism | None = None, **training) -> MemoryEstimate:
    par = par or Parallelism()
    tr = TrainingSpec(**{"micro_batch": 2, "micro_batches": 4, **training})
    return memory_per_gpu(model, tr, par, build_stage_plans(model, tr, par))


def _states(e: MemoryEstimate) -> float:
    return e.weights + e.grads + e.optimizer


# --- activations -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpt-20b", "llama-13b", "llemma-7b"])
@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_paper_models_match_the_published_formula(name, t):
    model, b = MODEL_PRESETS[name], 4
    s, h, a = model.seq_len, model.hidden, model.heads
    score = 0.0 if model.attention.value == "flash" else 5 * a * s / (h * t)
    sbh = s * b * h
    assert megatron_layer_activation_bytes(model, b, t) == pytest.approx(sbh * (10 + 24 / t + score), rel=1e-12)
    assert megatron_layer_activation_bytes(model, b, t, sp=True) == pytest.approx(sbh * (34 / t + score), rel=1e-12)
    # selective recompute: the attention core's 5as^2b/t is recomputed, not kept
    sel = megatron_layer_activation_bytes(model, b, t, recompute=Recompute.SELECTIVE)
    assert sel == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert megatron_layer_activation_bytes(model, b, t, sp=True, recompute=Recompute.SELECTIVE) == pytest.approx(
        34 * sbh / t, rel=1e-12)


def test_gqa_and_swiglu_terms_by_hand():
    model = ModelSpec("g", hidden=64, heads=4, kv_heads=2, mlp="swiglu", ffn_hidden=128, layers=2, seq_len=32,
                      vocab=256, attention="flash", bias=False, norm="rmsnorm")
    acts = layer_activations(model, b=2, mp=2)
    # 64 tokens. whole: 10h = 640 bytes per token -> 40960
    assert acts.whole == 64 * 640
    # per rank: Q 64/2 = 32 wide, K and V 1 kv head each of 16 -> qkv 64; Q,K,V 2*64 = 128 bytes,
    # out-projection input 2*64/2 = 64, SwiGLU gate+up 4*128/2 = 256 and product 2*128/2 = 128
    assert acts.split == 64 * (128 + 64 + 256 + 128)
    assert acts.scores == 0
    # t = 4 > 2 kv heads: each rank keeps one (replicated) kv head: qkv = 16 + 2*16 = 48
    assert layer_activations(model, b=2, mp=4).split == 64 * (2 * 48 + (2 * 64 + 6 * 128) / 4)


def test_sequence_parallel_activations_by_hand():
    model = ModelSpec("m", hidden=64, heads=4, layers=2, seq_len=32, vocab=256, attention="flash")
    e = _mem(model, Parallelism(mp=2, sequence_parallel=True), micro_batches=1, recompute="none")
    # 34*s*b*h/t = 34*4096/2 = 69632 per layer, 2 layers; logits 12 bytes * b*s * v/mp = 12*64*128
    assert e.activations == 2 * 69632 + 12 * 64 * 128
    full = _mem(model, Parallelism(mp=2, sequence_parallel=True), micro_batches=1, recompute="full")
    # each layer keeps its input 2sbh/t = 4096, plus one layer's 69632 during its backward
    assert full.activations == 2 * 4096 + 69632 + 12 * 64 * 128


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("model", [SMALL, SOFTMAX])
def test_sequence_parallel_never_increases_memory_and_shards_the_whole_terms(recompute, model):
    base, sp = Parallelism(mp=4, pp=2), Parallelism(mp=4, pp=2, sequence_parallel=True)
    assert _mem(model, sp, recompute=recompute).total <= _mem(model, base, recompute=recompute).total
    assert _mem(model, sp, recompute=recompute).activations < _mem(model, base, recompute=recompute).activations
    acts = layer_activations(model, 2, 4)
    for rc in (Recompute.NONE, Recompute.SELECTIVE):
        assert acts.bytes(4, True, rc) == pytest.approx(acts.bytes(4, False, rc) - acts.whole * (1 - 1 / 4))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_context_parallelism_divides_activations_by_cp(recompute):
    one = _mem(SMALL, Parallelism(dp=2), recompute=recompute)
    cp = _mem(SMALL, Parallelism(cp=2), recompute=recompute)
    assert cp.activations == pytest.approx(one.activations / 2)
    # the states shard over dp x cp: the same 2 ranks either way
    assert _states(cp) == _states(one)
    assert megatron_layer_activation_bytes(SMALL, 2, 1, cp=4) == megatron_layer_activation_bytes(SMALL, 2, 1) / 4


def test_selective_recompute_lies_strictly_between_none_and_full():
    none, sel, full = (_mem(SOFTMAX, Parallelism(mp=2), recompute=r).activations for r in ("none", "selective", "full"))
    assert full < sel < none
    # flash attention never keeps the scores: selective recompute then saves nothing
    assert _mem(SMALL, recompute="selective").activations == _mem(SMALL, recompute="none").activations


def test_gpipe_holds_every_micro_batch():
    par = Parallelism(pp=2, schedule="gpipe")
    e = _mem(SOFTMAX, par, micro_batches=4, recompute="none")
    plans = build_stage_plans(SOFTMAX, TrainingSpec(micro_batch=2, micro_batches=4), par)
    layer = megatron_layer_activation_bytes(SOFTMAX, 2, 1)
    stage0 = 4 * plans[0].encoders * layer  # all 4 micro-batches, not pp - 0 = 2
    assert e.stage == 0 and e.activations == pytest.approx(stage0)


def test_fp8_keeps_gemm_inputs_in_one_byte_and_adds_one_byte_per_gemm_weight():
    bf16 = _mem(SMALL, precision="bf16", recompute="none", micro_batches=1)
    fp8 = _mem(SMALL, precision="fp8", recompute="none", micro_batches=1)
    # per layer and token (h 64, ffn 256, t 1): the QKV and MLP-up inputs 2 -> 1 byte (-2h), the
    # out-projection input's FP8 copy beside flash attention's bf16 output (+h), the MLP-down input
    # 2 -> 1 byte (-ffn): 64 tokens * (-128 + 64 - 256)
    assert fp8.activations - bf16.activations == 4 * 64 * (-2 * 64 + 64 - 256)
    assert fp8.weights - bf16.weights == 4 * LAYER  # the encoders' weights, not embedding or head
    assert (fp8.grads, fp8.optimizer) == (bf16.grads, bf16.optimizer)


# --- weights, gradients, optimizer states -------------------------------------------------------

def test_zero_stages_and_fsdp_by_hand():
    par = Parallelism(dp=4)
    z0, z1, z2, z3 = (_mem(SMALL, par, zero_stage=z) for z in range(4))
    assert build_stage_plans(SMALL, TrainingSpec(), par)[0].params == PARAMS
    assert (z0.weights, z0.grads, z0.optimizer) == (2 * PARAMS, 2 * PARAMS, 12 * PARAMS)
    assert (z1.weights, z1.grads, z1.optimizer) == (2 * PARAMS, 2 * PARAMS, 12 * PARAMS / 4)
    assert (z2.weights, z2.grads, z2.optimizer) == (2 * PARAMS, 2 * PARAMS / 4, 12 * PARAMS / 4)
    # ZeRO-3: units of 49984 (4 layers: shards of 12496 x 4 ranks) and 32896 (root: 8224 x 4);
    # in flight the two largest, 2 x 49984 bf16; one unsharded layer gradient before its reduce-scatter
    assert z3.weights == 2 * PARAMS / 4 + 2 * (2 * LAYER)  # 116416 + 199936
    assert z3.grads == 2 * PARAMS / 4 + 2 * LAYER  # 116416 + 99968
    assert z3.optimizer == 12 * PARAMS / 4  # 698496
    assert _mem(SMALL, par, fsdp=True) == z3
    # a one-layer stage: the layer and the root are in flight together
    one = ModelSpec("one", hidden=64, heads=4, layers=1, seq_len=32, vocab=256, attention="flash")
    assert _mem(one, par, zero_stage=3).weights == 2 * (LAYER + ROOT) / 4 + 2 * (LAYER + ROOT)


@pytest.mark.parametrize("par", [Parallelism(dp=4), Parallelism(dp=2, cp=2), Parallelism(dp=2, pp=2, mp=2)])
def test_each_zero_stage_strictly_saves_memory(par):
    model = ModelSpec("m", hidden=64, heads=4, layers=16, seq_len=32, vocab=256, attention="flash")
    totals = [_mem(model, par, zero_stage=z).total for z in range(4)]
    assert totals[3] < totals[2] < totals[1] < totals[0]


@pytest.mark.parametrize("d", [1, 2, 8])
def test_distributed_optimizer_bytes_per_parameter(d):
    par = Parallelism(dp=d)
    plans = build_stage_plans(SMALL, TrainingSpec(), par)
    bf16 = _mem(SMALL, par, precision="bf16", distributed_optimizer=True)
    assert _states(bf16) == pytest.approx((6 + 12 / d) * plans[0].params)  # Megatron-Core's table
    assert (bf16.weights, bf16.grads) == (2 * PARAMS, 4 * PARAMS)
    fp16 = _mem(SMALL, par, precision="fp16", distributed_optimizer=True)
    assert _states(fp16) == pytest.approx((4 + 16 / d) * plans[0].params)
    # grad_reduce_in_fp32: false (NeMo's performance recipes): a bf16 gradient buffer, 2 + 2 + 12/d
    half = _mem(SMALL, par, precision="bf16", distributed_optimizer=True, grad_reduce_in_fp32=False)
    assert (half.weights, half.grads, half.optimizer) == (2 * PARAMS, 2 * PARAMS, bf16.optimizer)
    assert _mem(SMALL, par, precision="bf16", distributed_optimizer=True, grad_reduce_in_fp32=True) == bf16


@pytest.mark.parametrize("training,needle", [
    ({"precision": "bf16", "grad_reduce_in_fp32": False}, "training.distributed_optimizer: true"),
    ({"precision": "fp16", "distributed_optimizer": True, "grad_reduce_in_fp32": True}, "fp16 runs keep fp16"),
    ({"precision": "bf16", "distributed_optimizer": True, "grad_reduce_in_fp32": "no"}, "must be true or false"),
])
def test_grad_reduce_in_fp32_is_refused_where_it_means_nothing(training, needle):
    from trainsim.operators import ConfigError

    with pytest.raises(ConfigError, match=needle) as e:
        TrainingSpec(**training)
    assert e.value.field == "training.grad_reduce_in_fp32"


def test_sharding_group_includes_context_parallel_ranks():
    e = _mem(SMALL, Parallelism(dp=2, cp=2), zero_stage=2)
    assert (e.grads, e.optimizer) == (2 * PARAMS / 4, 12 * PARAMS / 4)


# --- fit report ----------------------------------------------------------------------------------

def test_fit_report():
    e = MemoryEstimate(weights=40 * GIB, grads=10 * GIB, optimizer=20 * GIB, activations=23.5 * GIB)
    no = fit_report(e, 80)
    assert (no.needed_gib, no.capacity_gib, no.fits) == (93.5, 80.0, False)
    assert no.message == "does not fit: 93.5 GiB needed of 80 GiB"
    yes = fit_report(e, 141)
    assert yes.fits and yes.message == "fits: 93.5 GiB of 141 GiB"
    assert fit_report(e, 93.5).fits  # exactly full still fits
    for bad in (0, -1, float("nan"), float("inf"), True, "80"):
        with pytest.raises(ValueError, match="capacity_gib"):
            fit_report(e, bad)


def test_published_fp8_runs_fit_with_their_recipes_gradient_buffer():
    # the three NeMo 24.07 rows that were estimated over 80 GiB with fp32 gradient buffers (85.6, 89.0 and
    # 83.2 GiB) ran with NeMo's bf16 ones (grad_sync_dtype: bf16); the bridge rows keep the fp32 default
    from pathlib import Path

    from trainsim.scenarios.published import read_published, scenario_mapping
    from trainsim.scenarios.schema import scenario_from_mapping

    rows = read_published(Path(__file__).resolve().parents[1] / "validation" / "published_h100.csv")
    for row in rows:
        mapping = scenario_mapping(row)
        sc = scenario_from_mapping(mapping, name=row["id"])
        tr = sc.training
        if row["source"] == "nemo-24.07":
            assert tr.grad_reduce_in_fp32 is False and tr.grad_reduce_bytes == 2
        else:
            assert "grad_reduce_in_fp32" not in mapping["training"]
        need = memory_per_gpu(sc.model, tr, sc.parallelism, build_stage_plans(sc.model, tr, sc.parallelism))
        assert need.total_gib < 80.0, row["id"]
        if row["id"] == "nemo2407-gpt3-20b":  # 10.14 B parameters per rank: 2 bytes each of gradients
            assert need.grads == pytest.approx(2 * build_stage_plans(sc.model, tr, sc.parallelism)[0].params)
