"""Peak device memory per GPU: weights, gradients, optimizer states and activations.

Two implementations are modelled (``TrainingSpec.framework``).

``megatron`` (the paper's setting, extended to Megatron-Core's options).

*States, bytes per parameter held by an MP rank of the stage* (P of them; g = ``grad_ranks`` =
dp x cp, the group the gradients are reduced and the states sharded over):

- ZeRO-0: 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master weights, two Adam moments),
  the mixed-precision accounting of Rajbhandari et al. 2020 (ZeRO, Sec. 3.1) in the paper's
  DeepSpeed setting; ZeRO-1: optimizer 12/g; ZeRO-2: gradients also 2/g; ZeRO-3 / FSDP: weights
  also 2/g, plus the unsharded 16-bit weights of the two FSDP units in flight (the one computing and
  the one prefetched: the two largest of the stage's units, layers of ``layer_shard * ranks``
  entries and the root of ``root_shard * ranks``) and the unsharded gradient of one unit, alive
  until its reduce-scatter.
- ``distributed_optimizer`` (Megatron-Core's distributed-optimizer guide,
  https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/dist_optimizer.html):
  bf16 (and FP8) runs accumulate gradients in an fp32 buffer, so 2 (bf16 weights) + 4 (fp32
  gradients, not sharded: the reduce-scatter runs in place in the buffer) + 12/g, the docs' 6 + 12/d
  (18 without it; we keep 2 + 2 + 12 there so the paper's cases do not move); with
  ``grad_reduce_in_fp32: false`` (NeMo's performance recipes) the buffer is bf16: 2 + 2 + 12/g;
  fp16 runs keep fp16 gradients and shard the fp32 main gradients with the optimizer: 2 + 2 + 16/g,
  the docs' 4 + 16/d.
- FP8: Transformer Engine also keeps an FP8 copy (1 byte) of every encoder GEMM weight on every
  rank (under ZeRO-3 of the layers in flight only, cast after their all-gather). Embedding and LM
  head run in bf16 and have none.

*Activations per layer and micro-batch* (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", Sec. 4, Eq. 1-6; 16-bit values, 1-byte dropout masks;
s = seq_len / cp tokens per rank, b micro-batch, h hidden, a heads, t = mp). The paper's 34sbh +
5as²b splits into (bytes per token, "whole" = replicated on every TP rank without SP):

======================  ==========================  ====================  ==============
block                   saved tensor                paper (sbh units)     here, per rank
======================  ==========================  ====================  ==============
norms (2)               inputs                      4 whole               4h whole
attention               QKV GEMM input              2 whole               2h whole
                        Q, K (for QK^T), V          4/t + 2/t             2 * qkv_width/t
                        softmax, mask, dropout out  5as/(ht)              5as/t
                        out-projection input        2/t                   2h/t
                        dropout mask                1 whole               h whole
MLP                     first GEMM input            2 whole               2h whole
                        GeLU input and output       8/t + 8/t             4 ffn/t
                        (SwiGLU: gate+up, product)                        4 ffn/t + 2 ffn/t
                        dropout mask                1 whole               h whole
======================  ==========================  ====================  ==============

so whole = 10h (8h for a model without dropout, ``model.dropout: false``: no masks), split =
2 qkv_width/t + 2h/t + 4 ffn/t (SwiGLU 6 ffn/t) per token, which for GeLU,
ffn = 4h and multi-head attention (qkv_width = 3h) is the paper's 10 + 24/t exactly. GQA's keys and
values are 2 kv head_dim wide (``qkv_width``; kv heads replicated when t > kv count once per rank).
RoPE adds nothing: it is linear in q and k, so autograd saves only the rotated q and k, which are
the Q and K above. Sequence parallelism divides the whole terms by t (34/t with the paper's widths).
Selective recompute re-runs the attention core, so the 5as²b/t term is not kept; flash attention
never materialises it (its log-sum-exp, 4 bytes per head and token, is ignored). Full recompute
keeps a layer's 16-bit input, 2sbh (2sbh/t with SP), plus one layer's full activations during its
backward. Under 1F1B stage ``s`` holds ``min(pp - s, m)`` micro-batches in flight, under GPipe all m.

FP8 (Transformer Engine): a Linear run in FP8 saves the FP8 (transposed) copy of its input for
the weight gradient *instead of* the bf16 input (TE's ``Linear`` saves ``inputmat_t`` when the
weight gradient is FP8, ``inputmat_no_fp8`` only when it is not; read from its source, not measured
here). A bf16 copy stays where another operator keeps it anyway: flash attention keeps its output,
the out-projection's input. So, per token: the QKV and MLP-up inputs (the norms' outputs, 2h whole
each) become 1-byte copies (-2h whole); the out-projection input gains a 1-byte copy (+h/t); the
MLP-down input (the activation's output, 2 ffn/t, which the activation's backward does not need)
becomes a 1-byte copy (-ffn/t). Until 2026-11-27 the copies were added to the bf16 ones (an
over-count that put 6 of 15 published FP8 runs, all of which ran, over 80 GiB: docs/published.md).

The LM head keeps fp32 log-probabilities and their gradient: 12 bytes per logit (v/mp per rank).

``hf`` (Hugging Face GPT-NeoX under ``torch.autocast``, measured in docs/h100.md):
fp32 weights (4), fp32 gradients (4), Adam moments (8) bytes per parameter, plus the
bf16 copies autocast makes of every linear weight (2 bytes each; they stay alive as
saved tensors, or in the autocast cache during a checkpointed forward). A layer saves
about 39 bytes per token and hidden unit: the fp32 residual input (4), bf16 inputs of the
four linears (2 + 2 + 2 + 8), the QKV output kept by the rotary views (6), the rotated
halves (1), sdpa's bf16 q, k and output (6) and GeLU's input (8). The loss keeps fp32
log-probabilities and, in its backward, an fp32 gradient in and out: 12 bytes per logit (16 per
local logit under loss_parallel, whose log-softmax is unfused; and the vocabulary-parallel
embedding's gradient is allocated at the whole vocabulary on every rank).
With checkpointing a layer keeps its fp32 input (4 bytes per token and unit).
Under PyTorch-native parallelism (operators.hf_stages): tensor parallelism divides the
sharded parameters and the activations of the sharded operators by ``mp`` (the fp32
residual input and the bf16 inputs of the two column-parallel linears, 8 of the 39 bytes,
stay whole); a pipeline stage holds its own layers, and under 1F1B stage ``s`` keeps
``min(pp - s, m)`` micro-batches in flight (GPipe: all m; without a pipeline one, whatever the
schedule), and torch.distributed.pipelining adds
its receive buffers (one per micro-batch and direction received in, kept between iterations) and
each in-flight micro-batch's stage output (the last stage: its bf16 logits) until its backward; under
GPipe the last stage's waiting micro-batches also keep their losses' fp32 log-probabilities (4 bytes
per logit; measured: pp4 at four shapes on 4 H200s within 1 %, validation/unseen8_h200_4gpu_machineCM/);
the runtime's step runs under one autocast, so every bf16 copy lives to its end, and each micro-batch's
backward after a stage's first holds its linears' bf16 weight gradients (2 bytes a parameter) to its end,
where they are made fp32 one weight at a time (the largest, V x d, of the LM head or the embedding's
dense gradient): with few activations (b = 1) the peak is the end of such a backward
(validation/memory_timeline_h200_2gpu_machineCP/);
DDP keeps a second fp32 copy of the gradients in its buckets (``gradient_as_bucket_view=False``,
the default) and a third while it rebuilds them in the second iteration, whatever the number of
micro-batches; FSDP2 keeps 1/dp of the weights, gradients and optimizer states, the root's unsharded
fp32 parameters and every layer's bf16 copies (autocast's, saved by its linears until its backward:
resharding frees the gathered fp32 weights, not them), and peaks at the larger of two moments: the
loss's backward (the logits, the head's bf16 copy, the last layer gathered for its backward) and a
layer's backward (that layer and the one prefetched gathered, its unsharded fp32 gradient, the head's
until the root's reduce-scatter); with one micro-batch neither moment has sharded gradients yet (each
appears as its layer's reduce-scatter ends; validation/memory_timeline_h200_2gpu_machineCR/). Measured
on 2 and 4 H200s (validation/unseen9_*, unseen10_*): FSDP2, FSDP4 and FSDP2 x TP within 2.7 % per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainsim.operators.partition import StageRole, kv_heads_per_rank, padded_vocab, stage_params
from trainsim.operators.spec import (
    Attention,
    Framework,
    GradAccumulation,
    Mlp,
    ModelSpec,
    Parallelism,
    Precision,
    Recompute,
    Schedule,
    TrainingSpec,
)
from trainsim.operators.stages import StagePlan

GIB = 2**30

# Hugging Face GPT-NeoX under autocast: bytes per (token x hidden unit) and per logit.
HF_LAYER_BYTES = 39.0
HF_CHECKPOINT_BYTES = 4.0
HF_LOSS_BYTES = 12.0
HF_LOSS_SAVED_BYTES = 4.0  # of HF_LOSS_BYTES, what the loss saves for its backward: the fp32 log-probabilities
HF_STAGE_LOGITS_BYTES = 2.0  # the last pipeline stage's output, its bf16 logits, kept for the backward
# loss_parallel (tensor parallelism's vocabulary-sharded loss) computes the log-softmax unfused
# (x - max, exp, log-sum-exp over the ranks): one more fp32 temporary per local logit at its peak
# (measured on 2 H100s: 13.7 bytes per local logit over the LM head's output, against 9.9 on one GPU;
# validation/memory_timeline_h100_2gpu/)
HF_LOSS_PARALLEL_EXTRA_BYTES = 4.0
HF_LAYER_GRAD_BYTES = 8.0  # gradient of the fp32 residual stream, in and out, while a layer runs backward
HF_LAYER_WHOLE_BYTES = 8.0  # of HF_LAYER_BYTES, what tensor parallelism does not shard (see above)

# Megatron, bytes per parameter (see the module docstring)
HALF = 2.0  # 16-bit weights, or 16-bit gradients in the paper's DeepSpeed setting
MAIN_GRAD = 4.0  # Megatron-Core's fp32 main gradients (distributed optimizer)
MASTER_GRAD = 4.0  # the fp32 master weights' own gradients (grad_accumulation: autograd)
ADAM = 12.0  # fp32 master weights and two moments
FP8_WEIGHT = 1.0


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on the most loaded GPU (one stage, one MP rank)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    stage: int = 0
    # bytes of gradients and activations that are never alive together: with one micro-batch
    # per update the gradients are created (set_to_none) only as the activations are freed
    not_together: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations - self.not_together

    @property
    def total_gib(self) -> float:
        return self.total / GIB

    def to_json(self) -> dict[str, float]:
        return {"weights_gib": self.weights / GIB, "grads_gib": self.grads / GIB,
                "optimizer_gib": self.optimizer / GIB, "activations_gib": self.activations / GIB,
                "not_together_gib": self.not_together / GIB, "total_gib": self.total_gib, "stage": self.stage}


@dataclass(frozen=True)
class MemoryFit:
    """An estimate against a GPU's memory (the caller's ``cluster.gpu.mem_gib``)."""

    needed_gib: float
    capacity_gib: float
    fits: bool

    @property
    def message(self) -> str:
        if self.fits:
            return f"fits: {self.needed_gib:.1f} GiB of {self.capacity_gib:g} GiB"
        return f"does not fit: {self.needed_gib:.1f} GiB needed of {self.capacity_gib:g} GiB"


def fit_report(estimate: MemoryEstimate, capacity_gib: float) -> MemoryFit:
    """Whether ``estimate`` fits in ``capacity_gib`` GiB of device memory."""
    if isinstance(capacity_gib, bool) or not isinstance(capacity_gib, int | float) or not capacity_gib > 0 \
            or capacity_gib == float("inf"):
        raise ValueError(f"capacity_gib must be a positive finite number of GiB, got {capacity_gib!r}")
    needed = estimate.total_gib
    return MemoryFit(needed_gib=needed, capacity_gib=float(capacity_gib), fits=needed <= capacity_gib)


@dataclass(frozen=True)
class LayerActivations:
    """One layer's saved activations for one micro-batch, in bytes, split by how they shard (see the
    module docstring's table): ``whole`` is replicated over the TP ranks unless sequence parallel,
    ``split`` is already per TP rank, ``scores`` is the attention core's 5as²b/t."""

    whole: float
    split: float
    scores: float
    fp8_whole: float = 0.0  # FP8's change to the whole part: the QKV and MLP-up inputs kept in 1 byte, not 2
    fp8_split: float = 0.0  # ... to the split part: the out-projection input's copy, the MLP-down input in 1 byte

    def bytes(self, mp: int, sp: bool = False, recompute: Recompute = Recompute.NONE) -> float:
        """Kept per layer: all of it, or without the attention core under selective recompute."""
        whole = (self.whole + self.fp8_whole) / (mp if sp else 1)
        scores = 0.0 if recompute is Recompute.SELECTIVE else self.scores
        return whole + self.split + self.fp8_split + scores


def layer_activations(model: ModelSpec, b: int, mp: int, cp: int = 1, fp8: bool = False) -> LayerActivations:
    """Korthikanti et al. (2022), Sec. 4 term by term, for any QKV and MLP width."""
    s, h, t = model.seq_len / cp, model.hidden, mp
    qkv = h // t + 2 * kv_heads_per_rank(model, t) * model.head_dim  # Q, K, V width on one rank
    mlp = (6 if model.mlp is Mlp.SWIGLU else 4) * model.ffn  # gate+up (2 ffn) and product (ffn), x 2 bytes
    # without dropout the two 1-byte masks (h each) and the scores' mask and dropout output are not kept
    drop = model.dropout
    scores = 0.0 if model.attention is Attention.FLASH else (5.0 if drop else 2.0) * model.heads * s * s * b / t
    return LayerActivations(whole=s * b * (10 if drop else 8) * h, split=s * b * (2 * qkv + (2 * h + mlp) / t),
                            scores=scores,
                            fp8_whole=-s * b * 2 * h if fp8 else 0.0,
                            fp8_split=s * b * (h - model.ffn) / t if fp8 else 0.0)


def megatron_layer_activation_bytes(model: ModelSpec, b: int, mp: int, *, sp: bool = False, cp: int = 1,
                                    recompute: Recompute = Recompute.NONE, fp8: bool = False) -> float:
    """Bytes one layer keeps per micro-batch (no recompute, or selective); see the module docstring."""
    return layer_activations(model, b, mp, cp, fp8).bytes(mp, sp and mp > 1, recompute)


def _linear_params(model: ModelSpec, layers: int, vocab: int, mp: int, head: bool) -> int:
    """Parameters of the matrices autocast casts to bf16 on one tensor-parallel rank: four linears per
    layer and, on the stage that has it, the LM head."""
    d, f = model.hidden, model.ffn
    per_layer = 3 * d * (d + 1) + d * (d + 1) + f * (d + 1) + d * (f + 1)
    return (layers * per_layer + (vocab * d if head else 0)) // mp


def _hf_memory(model: ModelSpec, training: TrainingSpec, par: Parallelism, plan: StagePlan) -> MemoryEstimate:
    b, l, d, n, mp, m = training.micro_batch, model.seq_len, model.hidden, plan.encoders, par.mp, training.micro_batches
    v = padded_vocab(model.vocab, 1)
    params = plan.params
    u = b * l * d  # tokens x hidden
    layer = (HF_LAYER_WHOLE_BYTES + (HF_LAYER_BYTES - HF_LAYER_WHOLE_BYTES) / mp) * u
    local_logits = b * l * v / mp if plan.role.has_head else 0.0
    logits = (HF_LOSS_BYTES + (HF_LOSS_PARALLEL_EXTRA_BYTES if mp > 1 else 0.0)) * local_logits
    in_flight = _in_flight(par, plan, m)
    if training.recompute is Recompute.FULL:
        kept = in_flight * n * HF_CHECKPOINT_BYTES * u
        acts = kept + max(logits, layer + HF_LAYER_GRAD_BYTES * u)
    else:
        acts = in_flight * n * layer + logits
    acts += _pipelining_runtime_bytes(par, plan, m, in_flight, local_logits)
    # GPipe: the last stage's micro-batches waiting for their backward keep their losses' saved tensors
    acts += (in_flight - 1) * HF_LOSS_SAVED_BYTES * local_logits
    if plan.fsdp is not None:  # FSDP2: 1/dp of everything, plus what is unsharded at a time
        units = plan.fsdp
        layer_b, root_b = units.layer_shard * units.ranks * 2.0, units.root_shard * units.ranks * 2.0  # fp32 bytes
        shard = params / units.ranks
        # Resharding after a layer's forward frees its gathered fp32 weights, not the bf16 copies autocast
        # made of them: the layer's linears saved those for their backward, so every layer's stay until
        # its backward, as without FSDP2 (below).
        casts = 2.0 * _linear_params(model, n, v, mp, False)
        head = _linear_params(model, 0, v, mp, plan.role.has_head)  # the LM head's weights (0 without it)
        # its bf16 copy, and its unsharded fp32 gradient, from its backward until the root's
        # reduce-scatter at the end of the backward
        head_cast, head_grad = 2.0 * head, 4.0 * head
        # The peak is one of two moments: the loss's backward (every activation with the logits, the
        # head's bf16 copy, one layer gathered: the last, prefetched for its backward) or a layer's
        # backward (that layer and the one prefetched gathered, the layer's unsharded fp32 gradient
        # until its reduce-scatter, the head's gradient; the logits and the head's copy freed). The
        # estimate is the union of both less what the larger lacks.
        moments_apart = min(2 * layer_b + head_grad, head_cast + logits)
        # With one micro-batch the sharded gradients do not exist at either moment: each layer's appears
        # only as its reduce-scatter ends, after the layers that peak (machine CP's timelines at b = 1:
        # the peak in the second layer's backward, 23.9-24.3 GiB of 24.3 without them).
        return MemoryEstimate(weights=4.0 * shard + root_b + 2 * layer_b + casts + head_cast,
                              grads=4.0 * shard + layer_b + head_grad, optimizer=8.0 * shard,
                              activations=acts, stage=plan.index,
                              not_together=moments_apart + (4.0 * shard if m <= in_flight else 0.0))
    # DDP: its reducer's bucket is a second fp32 copy, and in the second iteration, when DDP rebuilds
    # its buckets in the order the first backward produced the gradients, a third is live at the
    # peak: +8 bytes per parameter over one GPU at every m (m = 4 on 2 and 4 H100s, three shapes; m = 1
    # to 4 on 2 H200s, eleven shapes). Iteration by iteration (validation/probe_ddp_memory.py, machines
    # BY and BZ): the first and the steady iterations hold +4, the second (now and then the third too)
    # +8, and in one run of three at m = 1 the second held +4 as well; a run's peak is its largest
    # iteration's.
    grads = 4.0 * params * (3 if par.dp > 1 else 1)
    if mp > 1 and plan.role.has_embedding:
        # DTensor's vocabulary-parallel embedding runs its backward (embedding_dense_backward) at the
        # global vocabulary: every rank's gradient of it is V x d fp32, not its V/mp rows (traced
        # with torch.cuda.memory._snapshot on 2 H100s, validation/memory_timeline_h100_2gpu/)
        grads += 4.0 * v * d * (1.0 - 1.0 / mp)
    # Gradients are created (set_to_none) by the first backward: where every micro-batch's forward
    # runs before it (one micro-batch; a pipeline stage with m <= its warm-up), the peak at the start
    # of that backward has all the activations and no gradients yet.
    # The bf16 copies autocast makes of the linears' weights are held by the graph's saved tensors
    # until each layer's backward: gone with the activations before the gradients are all there.
    casts = 2.0 * _linear_params(model, n, v, mp, plan.role.has_head)
    weights, not_together = 4.0 * params + casts, min(4.0 * params, acts + casts) if m <= in_flight else 0.0
    if par.pp > 1 and m > 1:
        # torch.distributed.pipelining runs the whole step under one autocast, whose cache keeps each
        # bf16 copy for every micro-batch; a later micro-batch's backward leaves each linear's bf16
        # weight gradient (2 bytes a parameter) until that backward ends, beside the fp32 gradients and
        # the copies (validation/memory_timeline_h200_2gpu_machineCP/: per layer +2 bytes a parameter in
        # every backward after the stage's first, at two shapes). A second moment of the peak, then:
        # the end of such a backward, with the other in-flight micro-batches' activations only.
        held = casts  # one bf16 gradient per bf16 copy
        # after the second micro-batch's backward (the first that holds them, and the one with the most
        # others still in flight: the forwards ahead of it, in_flight of them from the warm-up, less two)
        others = max(0, min(m, 1 + in_flight) - 2)
        # As that backward ends, one weight's gradient at a time is made fp32 before it is added to the
        # one the first micro-batch left: the embedding's dense gradient (V x d), or a held bf16 one
        # cast up, the largest the LM head's (machine CP at d4992: +1.2 GiB on the first stage, +0.9 GiB
        # on the last, both after the last layer's backward)
        largest = v * d / mp if plan.role.has_head else model.ffn * d / mp
        dense = 4.0 * max(v * d if plan.role.has_embedding else 0.0, largest)
        alone = weights + grads + 8.0 * params  # the states without these gradients
        grads += held + dense
        states = alone + held + dense
        at_end = (states + others * n * layer + _pipelining_runtime_bytes(par, plan, m, others, local_logits)
                  + others * HF_LOSS_SAVED_BYTES * local_logits)
        # the activations' moment is the estimate without the pipeline's (what not_together said so far)
        not_together = states + acts - max(alone + acts - not_together, at_end)
    return MemoryEstimate(weights=weights, grads=grads, optimizer=8.0 * params, activations=acts,
                          stage=plan.index, not_together=not_together)


def _in_flight(par: Parallelism, plan: StagePlan, m: int) -> int:
    """Micro-batches whose activations a stage holds at its peak: under 1F1B stage s starts pp - s
    forwards before its first backward, under GPipe all m; without a pipeline (pp 1, whatever the
    schedule) one: each micro-batch's backward follows its forward."""
    if par.pp == 1:
        return 1
    return m if par.schedule is Schedule.GPIPE else min(par.pp - plan.index, m)


def _pipelining_runtime_bytes(par: Parallelism, plan: StagePlan, m: int, in_flight: int,
                              local_logits: float) -> float:
    """What torch.distributed.pipelining holds beside the layers' saved tensors (measured on 2 H100s,
    validation/memory_probe_h100_2gpu/): a receive buffer per micro-batch for each direction the
    stage receives in (activations from the previous stage, gradients from the next), allocated for
    all ``m`` micro-batches and kept between iterations; each in-flight micro-batch's stage output,
    kept for its backward (the fp32 residual stream; on the last stage the bf16 logits, which a
    one-GPU loop frees once the loss is taken)."""
    if par.pp == 1:
        return 0.0
    message = 2.0 * plan.p2p_entries  # bytes of one micro-batch's activations as they cross (fp32)
    receives = (plan.index > 0) + (plan.index < par.pp - 1)
    kept = in_flight * (HF_STAGE_LOGITS_BYTES * local_logits if plan.role.has_head else message)
    return m * receives * message + kept


def _megatron_states(model: ModelSpec, training: TrainingSpec, par: Parallelism,
                     plan: StagePlan) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states of one GPU of ``plan``'s stage, in bytes."""
    p, g = plan.params, par.grad_ranks
    fp8 = training.precision is Precision.FP8
    layers = stage_params(model, par.mp, StageRole.MIDDLE, plan.encoders) if fp8 else 0  # GEMMs in FP8
    if training.distributed_optimizer:
        if training.precision is Precision.FP16:  # fp16 gradients; fp32 main gradients sharded with the state
            return HALF * p, HALF * p, (MAIN_GRAD + ADAM) * p / g
        return HALF * p + FP8_WEIGHT * layers, training.grad_reduce_bytes * p, ADAM * p / g
    if training.fsdp_sharded and plan.fsdp is not None:
        u = plan.fsdp
        full_layer, full_root = u.layer_shard * u.ranks, u.root_shard * u.ranks
        units = sorted([full_layer] * u.layers + [full_root], reverse=True)
        live = units[0] + units[1]  # the unit computing and the one prefetched
        fp8_live = FP8_WEIGHT * full_layer * min(2, u.layers) if fp8 else 0.0
        return (HALF * (p / g + live) + fp8_live, HALF * (p / g + units[0]), ADAM * p / g)
    grads = HALF * p / (g if training.zero_stage >= 2 else 1)
    return HALF * p + FP8_WEIGHT * layers, grads, ADAM * p / (g if training.zero_stage >= 1 else 1)


def _megatron_memory(model: ModelSpec, training: TrainingSpec, par: Parallelism, plan: StagePlan) -> MemoryEstimate:
    b, mp, m, cp = training.micro_batch, par.mp, training.micro_batches, par.cp
    sp = par.sequence_parallel and mp > 1
    s = model.seq_len / cp
    layer = layer_activations(model, b, mp, cp, training.precision is Precision.FP8)
    n = plan.encoders
    in_flight = _in_flight(par, plan, m)
    if training.recompute is Recompute.FULL:
        checkpoint = 2.0 * s * b * model.hidden / (mp if sp else 1)  # the layer's 16-bit input
        acts = in_flight * n * checkpoint + (layer.bytes(mp, sp) if n else 0.0)
    else:
        acts = in_flight * n * layer.bytes(mp, sp, training.recompute)
    if plan.role.has_head:  # fp32 log-probabilities and their gradient over v/mp logits; under GPipe the
        # micro-batches waiting for their backward keep their log-probabilities (the saved softmax)
        local = b * s * padded_vocab(model.vocab, mp) / mp
        acts += (HF_LOSS_BYTES + (in_flight - 1) * HF_LOSS_SAVED_BYTES) * local
    weights, grads, optimizer = _megatron_states(model, training, par, plan)
    if training.grad_accumulation is GradAccumulation.AUTOGRAD:
        # the fp32 masters' .grad, made beside the 16-bit .grad once the backward is over: the step's
        # peak holds both and no activations (validation/train_3d.py: d4096-L8 37.75 GiB measured)
        master = MASTER_GRAD * plan.params
        return MemoryEstimate(weights=weights, grads=grads + master, optimizer=optimizer, activations=acts,
                              stage=plan.index, not_together=min(master, acts))
    return MemoryEstimate(weights=weights, grads=grads, optimizer=optimizer, activations=acts, stage=plan.index)


def memory_per_gpu(model: ModelSpec, training: TrainingSpec, par: Parallelism,
                   stage_plan: StagePlan | Sequence[StagePlan]) -> MemoryEstimate:
    """Peak memory of one GPU of ``stage_plan``'s stage; given all the plans, of the most loaded one."""
    stage_plans = (stage_plan,) if isinstance(stage_plan, StagePlan) else tuple(stage_plan)
    if not stage_plans:
        raise ValueError("no stage plan")
    one = _hf_memory if training.framework is Framework.HF else _megatron_memory
    return max((one(model, training, par, p) for p in stage_plans), key=lambda e: e.total)
