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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainsim.operators.partition import padded_vocab
from trainsim.operators.spec import Attention, Framework, ModelSpec, Parallelism, Recompute, TrainingSpec
from trainsim.operators.stages import StagePlan

GIB = 2**30

# Hugging Face GPT-NeoX under autocast: bytes per (token x hidden unit) and per logit.
HF_LAYER_BYTES = 39.0
HF_CHECKPOINT_BYTES = 4.0
HF_LOSS_BYTES = 12.0
HF_LAYER_GRAD_BYTES = 8.0  # gradient of the fp32 residual stream, in and out, while a layer runs backward


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


def _linear_params(model: ModelSpec, vocab: int) -> int:
    """Parameters of the matrices autocast casts to bf16: four linears per layer and the LM head."""
    d, f = model.hidden, model.ffn
    per_layer = 3 * d * (d + 1) + d * (d + 1) + f * (d + 1) + d * (f + 1)
    return model.layers * per_layer + vocab * d


def _hf_memory(model: ModelSpec, training: TrainingSpec, plan: StagePlan) -> MemoryEstimate:
    b, l, d, n = training.micro_batch, model.seq_len, model.hidden, model.layers
    v = padded_vocab(model.vocab, 1)
    params = plan.params
    u = b * l * d  # tokens x hidden
    logits = HF_LOSS_BYTES * b * l * v
    if training.recompute is Recompute.FULL:
        kept = n * HF_CHECKPOINT_BYTES * u
        acts = kept + max(logits, (HF_LAYER_BYTES + HF_LAYER_GRAD_BYTES) * u)
    else:
        acts = n * HF_LAYER_BYTES * u + logits
    grads = 4.0 * params
    return MemoryEstimate(weights=4.0 * params + 2.0 * _linear_params(model, v), grads=grads,
                          optimizer=8.0 * params, activations=acts,
                          not_together=min(grads, acts) if training.micro_batches == 1 else 0.0)


def memory_per_gpu(model: ModelSpec, training: TrainingSpec, par: Parallelism,
                   stage_plan: StagePlan | Sequence[StagePlan]) -> MemoryEstimate:
    """Peak memory of one GPU of ``stage_plan``'s stage; given all the plans, of the most loaded one."""
    stage_plans = (stage_plan,) if isinstance(stage_plan, StagePlan) else tuple(stage_plan)
    if not stage_plans:
        raise ValueError("no stage plan")
    if training.framework is Framework.HF:
        return _hf_memory(model, training, stage_plans[0])
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
