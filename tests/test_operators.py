"""Hand-computed checks of Eq. 1-6, Table III, partitioning and the operator lists."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainsim.operators import (
    MODEL_PRESETS,
    ConfigError,
    ModelSpec,
    OpKind,
    Parallelism,
    Recompute,
    TrainingSpec,
    build_stage_plans,
    encoder_params,
    features,
    padded_vocab,
    partition_encoders,
    stage_params,
)
from trainsim.operators.ops import Direction, Op, flops
from trainsim.operators.partition import StageRole

GPT20B = MODEL_PRESETS["gpt-20b"]


@pytest.mark.parametrize("mp,expected", [(1, 50304), (2, 50432), (4, 50688), (8, 51200)])
def test_padded_vocab_eq_1_2(mp, expected):
    # divisor = 128 mp; v = ceil(50257 / divisor) * divisor
    assert padded_vocab(50257, mp) == expected


@pytest.mark.parametrize(
    "layers,pp,expected",
    [
        (44, 4, (11, 12, 12, 9)),  # the reference's [11, 12, 9] for GPT-20B on 4 stages
        (44, 8, (5, 6, 6, 6, 6, 6, 6, 3)),  # [5, 6, 3]
        (40, 4, (10, 11, 11, 8)),  # LLaMA-13B: [10, 11, 8]
        (32, 4, (8, 9, 9, 6)),  # Llemma-7B: [8, 9, 6]
        (12, 1, (12,)),
    ],
)
def test_partition_matches_eq_3_5(layers, pp, expected):
    assert partition_encoders(layers, pp) == expected
    assert sum(expected) == layers


def test_partition_small_model_rule():
    # 10 encoders + 5 blocks = 15 on 2 stages -> 8 and 7 blocks -> 6 and 4 encoders
    assert partition_encoders(10, 2) == (6, 4)


def test_partition_errors_name_pp():
    with pytest.raises(ConfigError, match="parallelism.pp.*more stages than layers"):
        partition_encoders(4, 8)
    with pytest.raises(ConfigError, match="parallelism.pp.*no encoder"):
        partition_encoders(2, 2)  # 7 blocks -> 4 + 3 -> 2 and 0 encoders


@given(layers=st.integers(1, 200), pp=st.integers(1, 64))
def test_partition_adds_up_or_errors(layers, pp):
    try:
        parts = partition_encoders(layers, pp)
    except ConfigError:
        return
    assert sum(parts) == layers and min(parts) >= 1 and len(parts) == pp
    assert max(parts[1:-1], default=parts[0]) - min(parts[1:-1], default=parts[0]) <= 1


def test_encoder_params_eq_6():
    d, mp = 6144, 4
    # 4d + 8d(d+1)/mp + d(4d+1)/mp, every term divisible here
    assert encoder_params(d, mp) == 4 * d + 8 * d * (d + 1) // mp + d * (4 * d + 1) // mp == 113_284_608


def test_stage_params_table_iii():
    enc = 113_284_608
    vocab_shard = 50688 // 4 * 6144  # 77,856,768
    assert stage_params(GPT20B, 4, StageRole.FIRST, 11) == vocab_shard + 11 * enc == 1_323_987_456
    assert stage_params(GPT20B, 4, StageRole.MIDDLE, 12) == 12 * enc
    assert stage_params(GPT20B, 4, StageRole.LAST, 9) == 9 * enc + 2 * 6144 + vocab_shard == 1_097_430_528
    assert stage_params(GPT20B, 4, StageRole.ONLY, 44) == 44 * enc + 2 * vocab_shard + 2 * 6144


def test_features_table_i():
    op = Op(OpKind.LINEAR1, b=4, l=2048, d=6144, h=64, mp=4)
    assert features(op) == (8192, 6144, 4608)
    assert features(Op(OpKind.BADDBMM, b=4, l=2048, d=6144, h=64, mp=4)) == (64, 2048, 96, 2048)
    assert features(Op(OpKind.FLASH_ATTN, b=4, l=4096, d=4096, h=32, mp=2)) == (4, 4096, 16, 128)
    assert features(Op(OpKind.EMBEDDING, b=4, l=2048, d=6144, mp=4, v=50688)) == (8192, 12672, 6144)
    assert features(Op(OpKind.OPTIMIZER_MIDDLE, d=6144, mp=4, layers=12)) == (4, 6144, 12)
    # GEMM flops: 2 m n k; backward twice
    assert flops(op, Direction.FWD) == 2 * 8192 * 6144 * 4608
    assert flops(op, Direction.BWD) == 2 * flops(op, Direction.FWD)


def test_stage_plans_gpt20b_4_4_8():
    plans = build_stage_plans(GPT20B, TrainingSpec(), Parallelism(4, 4, 8))
    assert [p.role for p in plans] == [StageRole.FIRST, StageRole.MIDDLE, StageRole.MIDDLE, StageRole.LAST]
    first, last = plans[0], plans[-1]
    kinds = {oc.op.kind: oc.count for oc in first.forward}
    # 13 operator calls per encoder: 2 layernorms and 2 residual adds counted twice
    assert kinds[OpKind.EMBEDDING] == 1 and kinds[OpKind.LAYERNORM] == 22 and kinds[OpKind.RES_ADD] == 22
    assert kinds[OpKind.FUSED_SOFTMAX] == 11 and OpKind.LINEAR_FINAL not in kinds
    last_kinds = {oc.op.kind: oc.count for oc in last.forward}
    assert last_kinds[OpKind.LAYERNORM] == 2 * 9 + 1 and last_kinds[OpKind.CROSS_ENTROPY] == 1
    # MP syncs: 1 forward per encoder (+ the embedding's), 2 backward + the recomputed forward
    assert first.mp_allreduces_fwd == 11 + 1 and first.mp_allreduces_bwd == 2 * 11 + 11
    assert last.mp_allreduces_fwd == 9
    assert first.mp_allreduce_entries == 4 * 2048 * 6144
    assert first.p2p_entries == 4 * 2048 * 6144 // 4
    # a full recompute re-runs every encoder's forward
    assert sum(oc.count for oc in first.recompute) == 13 * 11
    none = build_stage_plans(GPT20B, TrainingSpec(recompute=Recompute.NONE), Parallelism(4, 4, 8))
    assert none[0].recompute == () and none[0].mp_allreduces_bwd == 22


def test_flash_and_rmsnorm_ops():
    plans = build_stage_plans(MODEL_PRESETS["llemma-7b"], TrainingSpec(micro_batches=8), Parallelism(4, 2, 2))
    kinds = {oc.op.kind for oc in plans[1].forward}
    assert OpKind.FLASH_ATTN in kinds and OpKind.RMSNORM in kinds
    assert OpKind.BADDBMM not in kinds and OpKind.LAYERNORM not in kinds


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: ModelSpec("x", hidden=0, heads=1, layers=1, seq_len=1), "model.hidden"),
        (lambda: ModelSpec("x", hidden=100, heads=3, layers=1, seq_len=1), "model.heads"),
        (lambda: TrainingSpec(micro_batch=-1), "training.micro_batch"),
        (lambda: TrainingSpec(precision="fp4"), "training.precision"),
        (lambda: Parallelism(pp=0), "parallelism.pp"),
        (lambda: Parallelism(mp=1.5), "parallelism.mp"),
        (lambda: build_stage_plans(GPT20B, TrainingSpec(), Parallelism(1, 3, 1)), "parallelism.mp"),
        (lambda: build_stage_plans(GPT20B, TrainingSpec(), Parallelism(64, 1, 1)), "parallelism.pp"),
    ],
)
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ConfigError) as e:
        make()
    assert e.value.field == field


def test_a_stage_with_no_encoder_is_named_and_no_count_below_zero_is_printed():
    from trainsim.operators.partition import partition_encoders

    with pytest.raises(ConfigError) as e:
        partition_encoders(44, 32)  # 49 blocks over 32 stages: the last keeps 1 - 3
    msg = str(e.value)
    assert "leaves stages 0, 31 with no encoder" in msg and "-2" not in msg and "[" not in msg
