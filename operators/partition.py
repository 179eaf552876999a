"""Vocabulary padding (Eq. 1-2), pipeline partitioning (Eq. 3-5), parameter counts (Eq. 6, Table III)."""

from __future__ import annotations

import math
from enum import Enum

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Mlp, ModelSpec, Norm, Parallelism, Position, Split

#: Blocks that precede the encoders (embedding, pre-transformer) and follow them
#: (post-transformer, final norm, final linear), as Megatron/GPT-NeoX count them.
BLOCKS_BEFORE = 2
BLOCKS_AFTER = 3


class StageRole(str, Enum):
    FIRST = "first"
    MIDDLE = "middle"
    LAST = "last"
    ONLY = "only"  # pp == 1: one stage holds everything

    @property
    def has_embedding(self) -> bool:
        return self in (StageRole.FIRST, StageRole.ONLY)

    @property
    def has_head(self) -> bool:
        return self in (StageRole.LAST, StageRole.ONLY)


def stage_role(index: int, pp: int) -> StageRole:
    if pp == 1:
        return StageRole.ONLY
    if index == 0:
        return StageRole.FIRST
    if index == pp - 1:
        return StageRole.LAST
    return StageRole.MIDDLE


def padded_vocab(vocab: int, mp: int) -> int:
    """Eq. 1-2: pad the vocabulary to a multiple of ``128 * mp``."""
    divisor = 128 * mp
    return math.ceil(vocab / divisor) * divisor


def partition_encoders(layers: int, pp: int) -> tuple[int, ...]:
    """Encoders per stage (Eq. 3-5), with a rule that always adds up to ``layers``.

    The ``layers + 5`` pipeline blocks are split as evenly as possible, the
    remainder going to the earliest stages (DeepSpeed's uniform partition); the
    first stage then gives up its 2 leading blocks and the last its 3 trailing
    ones. For every paper layout this is exactly Eq. 3-5 with the reference's
    floor for middle and last stages ([11, 12, 12, 9] for 44 encoders on 4
    stages); unlike the literal ``ceil`` of Eq. 3-5 it never over- or under-counts.
    A stage left with no encoder is an error.
    """
    if pp > layers:
        raise ConfigError("parallelism.pp", f"{pp} stages for {layers} encoders: more stages than layers")
    blocks = layers + BLOCKS_BEFORE + BLOCKS_AFTER
    base, extra = divmod(blocks, pp)
    counts = [base + (1 if s < extra else 0) for s in range(pp)]
    counts[0] -= BLOCKS_BEFORE
    counts[-1] -= BLOCKS_AFTER
    if min(counts) < 1:  # name the stages, not the arithmetic's counts (the last can go below zero)
        empty = [s for s, c in enumerate(counts) if c < 1]
        raise ConfigError(
            "parallelism.pp",
            f"{pp} stages for {layers} encoders leaves stage{'s' if len(empty) > 1 else ''} "
            f"{', '.join(map(str, empty))} with no encoder (the paper's split: {layers} + 5 pipeline blocks "
            f"evenly, the first stage 2 fewer, the last 3 fewer); use fewer stages",
        )
    assert sum(counts) == layers
    return tuple(counts)


def split_encoders(layers: int, par: Parallelism) -> tuple[int, ...]:
    """Encoders per stage under ``par.split``.

    ``deepspeed`` is :func:`partition_encoders` (the paper's). ``megatron`` gives every stage
    ``layers / pp`` encoders, or ``first_stage_layers`` / ``last_stage_layers`` to the first / last
    and the rest equally to the others, as Megatron-Core does; the embedding stays on the first
    stage and the loss on the last, beside their encoders. With interleaving each stage's share must
    also split into its ``virtual_stages`` chunks.
    """
    if par.split is Split.DEEPSPEED:
        return partition_encoders(layers, par.pp)
    pp, first, last = par.pp, par.first_stage_layers, par.last_stage_layers
    if pp == 1:
        if first or last:
            raise ConfigError("parallelism.first_stage_layers" if first else "parallelism.last_stage_layers",
                              "one pipeline stage holds every layer; an uneven first or last stage needs pp > 1")
        return (layers,)
    fixed = [(0, first), (pp - 1, last)]
    rest_stages = pp - sum(1 for _, n in fixed if n)
    rest = layers - first - last
    what = "encoders left for the other stages" if first or last else "encoders"
    if rest < 0 or (rest_stages == 0 and rest != 0):
        raise ConfigError("parallelism.first_stage_layers" if first else "parallelism.last_stage_layers",
                          f"first_stage_layers {first} + last_stage_layers {last} do not add up to the model's "
                          f"{layers} layers over {pp} stages")
    if rest_stages and rest % rest_stages:
        raise ConfigError("parallelism.pp", f"Megatron's split needs the {rest} {what} divisible by the {rest_stages} "
                                            f"stages that share them equally; set parallelism.first_stage_layers / "
                                            f"last_stage_layers, or split: deepspeed")
    each = rest // rest_stages if rest_stages else 0
    if each == 0 and rest_stages:
        raise ConfigError("parallelism.pp", f"{pp} stages for {layers} encoders leaves a stage with no encoder")
    counts = [each] * pp
    for s, n in fixed:
        if n:
            counts[s] = n
    if par.virtual_stages > 1 and any(n % par.virtual_stages for n in counts):
        raise ConfigError("parallelism.virtual_stages", f"stage encoder counts {counts} do not split into "
                                                        f"{par.virtual_stages} equal model chunks")
    return tuple(counts)


def norm_params(model: ModelSpec) -> int:
    """One norm: a scale (RMSNorm) or a scale and a bias (LayerNorm)."""
    return model.hidden if model.norm is Norm.RMSNORM else 2 * model.hidden


def kv_heads_per_rank(model: ModelSpec, mp: int) -> int:
    """Key/value heads on one MP rank: split when mp divides them, else one (replicated)."""
    return model.kv // mp if model.kv >= mp else 1


def layer_params(model: ModelSpec, mp: int) -> int:
    """One transformer layer's parameters on one MP rank (Megatron's sharding, biases if ``model.bias``).

    Column-parallel (QKV, MLP up / gate) weights and biases are split over ``mp``, row-parallel
    (attention output, MLP down) weights split and their biases whole; norms whole. The QKV
    projection has ``heads`` query and ``kv_heads`` key and value heads; replicated kv heads count
    once per rank.
    """
    d, f, hd = model.hidden, model.ffn, model.head_dim
    bias = 1 if model.bias else 0
    qkv_out = d // mp + 2 * kv_heads_per_rank(model, mp) * hd
    up_out = (2 if model.mlp is Mlp.SWIGLU else 1) * f // mp
    return (2 * norm_params(model)
            + qkv_out * (d + bias) + d * (d // mp) + bias * d
            + up_out * (d + bias) + d * (f // mp) + bias * d)


def model_params(model: ModelSpec) -> int:
    """Parameters of the whole model (as a model card counts them: unpadded vocabulary, a tied
    embedding once, learned position embeddings included)."""
    emb = model.vocab * model.hidden
    pos = model.seq_len * model.hidden if model.position is Position.LEARNED else 0
    return (model.layers * layer_params(model, 1) + emb * (1 if model.tied_embeddings else 2) + pos
            + norm_params(model))


def encoder_params(d: int, mp: int, ffn: int | None = None) -> int:
    """Eq. 6 on one MP rank: 2 norms, QKV, attention output, MLP up and down (with biases).

    With ``ffn = 4d`` this is ``4d + 8d(d+1)/mp + d(4d+1)/mp``. Integer division per
    linear matches how Megatron shards each weight.
    """
    f = ffn or 4 * d
    norms = 2 * (2 * d)
    qkv = 3 * d * (d + 1) // mp
    attn_out = d * (d + 1) // mp
    mlp_up = f * (d + 1) // mp
    mlp_down = d * (f + 1) // mp
    return norms + qkv + attn_out + mlp_up + mlp_down


def stage_params(model: ModelSpec, mp: int, role: StageRole, encoders: int) -> int:
    """Table III: parameters held by one MP rank of a stage.

    The paper's GPT-NeoX (LayerNorm, GeLU, multi-head, biases) is Eq. 6 exactly; other models
    count per :func:`layer_params`. A tied LM head adds nothing where the embedding is on the same
    stage; on a separate last stage it is a copy (Megatron keeps one there and all-reduces the two
    gradients). Learned position embeddings are whole on every MP rank of the first stage.
    """
    vocab_shard = padded_vocab(model.vocab, mp) // mp * model.hidden
    n = encoders * stage_layer_params(model, mp)
    if role.has_embedding:
        n += vocab_shard
        if model.position is Position.LEARNED:
            n += model.seq_len * model.hidden
    if role.has_head:
        n += norm_params(model) if model.norm is Norm.RMSNORM else 2 * model.hidden
        if not (model.tied_embeddings and role.has_embedding):
            n += vocab_shard
    return n


def stage_layer_params(model: ModelSpec, mp: int) -> int:
    """One encoder's parameters on one MP rank as stages count them: Eq. 6 for the paper's layer,
    else :func:`layer_params`."""
    if _is_paper_layer(model):
        return encoder_params(model.hidden, mp, model.ffn)
    return layer_params(model, mp)


def _is_paper_layer(model: ModelSpec) -> bool:
    """Eq. 6's layer: the paper counts LayerNorm-sized norms and biases even for its RMSNorm models."""
    return model.mlp is Mlp.GELU and model.kv == model.heads and model.bias
