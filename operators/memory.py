"""Peak device memory per GPU: weights, gradients, optimizer states and activations.

Two implementations are modelled (``TrainingSpec.framework``):

``megatron`` (the paper's setting): half-precision weights and gradients (2 + 2 bytes
per parameter), fp32 master weights and two Adam moments (12 bytes per parameter)
divided by dp under ZeRO-1. Activations per layer and micro-batch follow Korthikanti
et al. 2022 (Reducing Activation Recomputation in Large Transformer Models), tensor
parallel without sequence parallelism: ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` bytes, the
last term dropped with flash attention (no score matrix is kept). With full recompute a
layer keeps only its 16-bit input (``2*s*b*h``) plus, during its backward, one layer's
full activations. Under 1F1B, stage ``s`` holds ``min(pp - s, m)`` micro-batches in flight.

``hf`` (Hugging Face GPT-NeoX under ``torch.autocast``, measured in docs/h100.md):
fp32 weights (4), fp32 gradients (4), Adam moments (8) bytes per parameter, plus the
bf16 copies autocast makes of every linear weight (2 bytes each; they stay alive as
saved tensors, or in the autocast cache during a checkpointed forward). A layer saves
about 39 bytes per token and hidden unit: the fp32 residual input (4), bf16 inputs of the
four linears (2 + 2 + 2 + 8), the QKV output kept by the rotary views (6), the rotated
halves (1), sdpa's bf16 q, k and output (6) and GeLU's input (8). The loss keeps fp32
log-probabilities and, in its backward, an fp32 gradient in and out: 12 bytes per logit.
With checkpointing a layer keeps its fp32 input (4 bytes per token and unit).
Under PyTorch-native parallelism (operators.hf_stages): tensor parallelism divides the
sharded parameters and the activations of the sharded operators by ``mp`` (the fp32
residual input and the bf16 inputs of the two column-parallel linears, 8 of the 39 bytes,
stay whole); a pipeline stage holds its own layers, and under 1F1B stage ``s`` keeps
``min(pp - s, m)`` micro-batches in flight (GPipe: all m); DDP keeps a second fp32 copy of
the gradients in its buckets (``gradient_as_bucket_view=False``, the default) and, when
micro-batches accumulate under ``no_sync``, a third during the synced backward; FSDP2 keeps
1/dp of the weights, gradients and optimizer states plus the unsharded fp32 parameters of the
layer computing, the one prefetched and the root, and one layer's unsharded gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainsim.operators.partition import padded_vocab
from trainsim.operators.spec import Attention, Framework, ModelSpec, Parallelism, Recompute, Schedule, TrainingSpec
from trainsim.operators.stages import StagePlan

GIB = 2**30

# Hugging Face GPT-NeoX under autocast: bytes per (token x hidden unit) and per logit.
HF_LAYER_BYTES = 39.0
HF_CHECKPOINT_BYTES = 4.0
HF_LOSS_BYTES = 12.0
HF_LAYER_GRAD_BYTES = 8.0  # gradient of the fp32 residual stream, in and out, while a layer runs backward
HF_LAYER_WHOLE_BYTES = 8.0  # of HF_LAYER_BYTES, what tensor parallelism does not shard (see above)


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


def megatron_layer_activation_bytes(model: ModelSpec, b: int, mp: int) -> float:
    """Korthikanti et al. (2022), Eq. 2 with tensor parallelism, 16-bit activations."""
    s, h, a = model.seq_len, model.hidden, model.heads
    per = 10.0 + 24.0 / mp
    if model.attention is not Attention.FLASH:
        per += 5.0 * a * s / (h * mp)
    return s * b * h * per


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
    logits = HF_LOSS_BYTES * b * l * v / mp if plan.role.has_head else 0.0
    in_flight = min(par.pp - plan.index, m) if par.schedule is not Schedule.GPIPE else m
    if training.recompute is Recompute.FULL:
        kept = in_flight * n * HF_CHECKPOINT_BYTES * u
        acts = kept + max(logits, layer + HF_LAYER_GRAD_BYTES * u)
    else:
        acts = in_flight * n * layer + logits
    if plan.fsdp is not None:  # FSDP2: 1/dp of everything, plus what is unsharded at a time
        units = plan.fsdp
        layer_b, root_b = units.layer_shard * units.ranks * 2.0, units.root_shard * units.ranks * 2.0  # fp32 bytes
        live = 2 * layer_b + root_b  # the layer computing, the one prefetched, the root (not resharded)
        return MemoryEstimate(weights=4.0 * params / units.ranks + live
                              + 2.0 * _linear_params(model, min(2, n), v, mp, plan.role.has_head),
                              grads=4.0 * params / units.ranks + layer_b, optimizer=8.0 * params / units.ranks,
                              activations=acts, stage=plan.index)
    # DDP: its reducer's bucket is a second fp32 copy; with no_sync accumulation (m > 1) the synced
    # backward also holds the new gradient beside the accumulated .grad and the bucket: 3 copies
    # (measured on 2 and 4 H100s: +8.0 bytes per parameter over one GPU at m = 4, three shapes)
    grads = 4.0 * params * ((3 if m > 1 else 2) if par.dp > 1 else 1)
    return MemoryEstimate(weights=4.0 * params + 2.0 * _linear_params(model, n, v, mp, plan.role.has_head),
                          grads=grads, optimizer=8.0 * params, activations=acts, stage=plan.index,
                          not_together=min(4.0 * params, acts) if m == 1 else 0.0)


def memory_per_gpu(model: ModelSpec, training: TrainingSpec, par: Parallelism,
                   stage_plan: StagePlan | Sequence[StagePlan]) -> MemoryEstimate:
    """Peak memory of one GPU of ``stage_plan``'s stage; given all the plans, of the most loaded one."""
    stage_plans = (stage_plan,) if isinstance(stage_plan, StagePlan) else tuple(stage_plan)
    if not stage_plans:
        raise ValueError("no stage plan")
    if training.framework is Framework.HF:
        return max((_hf_memory(model, training, par, p) for p in stage_plans), key=lambda e: e.total)
    b, mp, pp, m = training.micro_batch, par.mp, par.pp, training.micro_batches
    layer = megatron_layer_activation_bytes(model, b, mp)
    checkpoint = 2.0 * model.seq_len * b * model.hidden
    v = padded_vocab(model.vocab, mp)
    best: MemoryEstimate | None = None
    for plan in stage_plans:
        in_flight = min(pp - plan.index, m)
        if training.recompute is Recompute.FULL:
            acts = in_flight * plan.encoders * checkpoint + (layer if plan.encoders else 0.0)
        else:
            acts = in_flight * plan.encoders * layer
        if plan.role.has_head:  # fp32 log-probabilities and their gradient over v/mp logits
            acts += HF_LOSS_BYTES * b * model.seq_len * v / mp
        shard = plan.params / (par.dp if training.zero_stage >= 1 else 1)
        est = MemoryEstimate(weights=2.0 * plan.params, grads=2.0 * plan.params, optimizer=12.0 * shard,
                             activations=acts, stage=plan.index)
        if best is None or est.total > best.total:
            best = est
    assert best is not None
    return best
