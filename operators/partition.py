"""Vocabulary padding (Eq. 1-2), pipeline partitioning (Eq. 3-5), parameter counts (Eq. 6, Table III)."""

from __future__ import annotations

import math
from enum import Enum

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import ModelSpec

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
    if min(counts) < 1:
        raise ConfigError(
            "parallelism.pp",
            f"{pp} stages for {layers} encoders leaves a stage with no encoder ({counts}); use fewer stages",
        )
    assert sum(counts) == layers
    return tuple(counts)


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
    """Table III: parameters held by one MP rank of a stage."""
    vocab_shard = padded_vocab(model.vocab, mp) // mp * model.hidden
    n = encoders * encoder_params(model.hidden, mp, model.ffn)
    if role.has_embedding:
        n += vocab_shard
    if role.has_head:
        n += 2 * model.hidden + vocab_shard
    return n
