"""Published-model presets (issue 10): parameter counts against their sources, and that they plan."""

from __future__ import annotations

import pytest

from trainsim.operators import (
    MODEL_PRESETS,
    Attention,
    Mlp,
    Norm,
    Parallelism,
    Position,
    TrainingSpec,
    build_stage_plans,
    model_params,
)
from trainsim.operators.partition import layer_params
from trainsim.operators.presets import PRESET_SOURCES

PUBLISHED = ("llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mistral-7b", "gpt3-175b",
             "nemotron4-340b")

#: A layout each model is trained with or fits (pp, mp): heads, kv heads and the MLP width split over mp.
LAYOUTS = {
    "llama2-7b": (2, 2),
    "llama2-70b": (4, 8),
    "llama3-8b": (2, 4),
    "llama3-70b": (4, 8),
    "llama3-405b": (16, 8),  # the Llama 3 paper's TP 8 x PP 16
    "mistral-7b": (2, 4),
    "gpt3-175b": (8, 8),
    "nemotron4-340b": (12, 8),  # the Nemotron-4 340B report's TP 8 x PP 12
}


def test_every_published_preset_has_a_source():
    assert set(PRESET_SOURCES) == set(PUBLISHED)
    assert set(PUBLISHED) <= set(MODEL_PRESETS)
    for name, (url, params) in PRESET_SOURCES.items():
        assert url.startswith("https://"), name
        assert params > 1e9, name
        assert MODEL_PRESETS[name].name == name


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_count_matches_the_card(name):
    _, card = PRESET_SOURCES[name]
    assert abs(model_params(MODEL_PRESETS[name]) / card - 1) <= 0.005


def test_table_iv_presets_unchanged():
    assert {"gpt-20b", "llama-13b", "llemma-7b"} <= set(MODEL_PRESETS)
    gpt = MODEL_PRESETS["gpt-20b"]
    assert (gpt.hidden, gpt.heads, gpt.layers, gpt.seq_len, gpt.fwd_mp_syncs) == (6144, 64, 44, 2048, 1)
    assert gpt.attention is Attention.FUSED_SOFTMAX and gpt.mlp is Mlp.GELU and gpt.bias


def test_llama2_7b_by_hand():
    # d = 4096, ffn = 11008, v = 32000, 32 layers; no biases, RMSNorm (one d-vector per norm).
    # per layer: attention 4*d*d = 67,108,864 (Q, K, V, O; multi-head)
    #          + MLP 3*d*ffn = 3*4096*11008 = 135,266,304 (gate, up, down)
    #          + norms 2*d = 8,192                                  = 202,383,360
    # 32 layers: 6,476,267,520; embeddings 2*v*d = 262,144,000 (untied); final norm d = 4,096
    # total 6,476,267,520 + 262,144,000 + 4,096 = 6,738,415,616 (the card's 6,738,417,664 adds
    # the 32 x 64 rotary inv_freq buffer entries stored in the checkpoint)
    d, f, v = 4096, 11008, 32000
    per_layer = 4 * d * d + 3 * d * f + 2 * d
    assert per_layer == 202_383_360
    model = MODEL_PRESETS["llama2-7b"]
    assert layer_params(model, 1) == per_layer
    assert model_params(model) == 32 * per_layer + 2 * v * d + d == 6_738_415_616
    assert PRESET_SOURCES["llama2-7b"][1] - model_params(model) == 32 * 64


def test_gqa_and_swiglu_shapes():
    m = MODEL_PRESETS["llama3-8b"]
    assert m.kv == 8 and m.head_dim == 128 and m.qkv_width == 4096 + 2 * 8 * 128
    assert m.mlp is Mlp.SWIGLU and m.ffn == 14336 and m.norm is Norm.RMSNORM and not m.bias
    n = MODEL_PRESETS["nemotron4-340b"]
    assert n.head_dim == 192 and n.qkv_width == 18432 + 2 * 8 * 192 and n.ffn == 4 * 18432
    assert n.mlp is Mlp.GELU and n.norm is Norm.LAYERNORM and not n.bias and not n.tied_embeddings
    g = MODEL_PRESETS["gpt3-175b"]
    assert g.position is Position.LEARNED and not g.rotary and g.tied_embeddings and g.bias
    for name in PUBLISHED:
        assert MODEL_PRESETS[name].attention is Attention.FLASH, name
        assert (MODEL_PRESETS[name].fwd_mp_syncs, MODEL_PRESETS[name].bwd_mp_syncs) == (2, 2), name


@pytest.mark.parametrize("name", PUBLISHED)
def test_builds_stage_plans(name):
    pp, mp = LAYOUTS[name]
    model = MODEL_PRESETS[name]
    plans = build_stage_plans(model, TrainingSpec(micro_batch=1, micro_batches=8), Parallelism(pp=pp, mp=mp, dp=1))
    assert len(plans) == pp
    assert sum(p.encoders for p in plans) == model.layers
