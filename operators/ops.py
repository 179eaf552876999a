"""Operators and collectives: what the duration models are asked about.

An :class:`Op` carries the raw shape (b, l, d, h, mp, v, layers); its regressor
features are the paper's Table I, computed by :func:`features`. Keeping the raw
shape lets one sample table serve both the features and FLOP/byte counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum


class Direction(str, Enum):
    FWD = "fwd"
    BWD = "bwd"
    UPDATE = "update"  # optimizer operators have one duration


class OpKind(str, Enum):
    EMBEDDING = "embedding"
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    LINEAR1 = "linear1"  # QKV projection
    ROPE = "rope"
    BADDBMM = "baddbmm"  # QK^T
    FILLMASK = "fillmask"
    SOFTMAX = "softmax"
    FUSED_SOFTMAX = "fused_softmax"  # scaled upper-triangular masked softmax
    # dropout on the attention probabilities (Megatron's CoreAttention outside flash attention): one
    # kernel reading the b*h/mp*l*l scores and writing them with their 1-byte keep-mask
    ATTN_DROPOUT = "attn_dropout"
    BMM = "bmm"  # .V
    FLASH_ATTN = "flash_attn"
    LINEAR2 = "linear2"  # attention output
    LINEAR3 = "linear3"  # MLP up
    GELU = "gelu"
    LINEAR4 = "linear4"  # MLP down
    LINEAR_FINAL = "linear_final"  # LM head
    CROSS_ENTROPY = "cross_entropy"  # vocab-parallel cross-entropy
    RES_ADD = "res_add"
    OPTIMIZER_FIRST = "optimizer_first"  # features [mp, d, encoders]
    OPTIMIZER_MIDDLE = "optimizer_middle"
    OPTIMIZER_LAST = "optimizer_last"
    # Hugging Face GPT-NeoX under torch.autocast(bf16) with fp32 weights (TrainingSpec.framework
    # "hf"). Each is the exact torch code one HF sub-block runs, so the weight casts (fp32 ->
    # bf16 every forward), the fp32 residual stream and norms, the fp32 loss and the fp32
    # gradient casts are measured inside the operator they belong to. ``mp`` is the tensor-parallel
    # degree of PyTorch's DTensor Megatron plan (framework "hf" with mp > 1): QKV, MLP-up and the LM
    # head are column-parallel (output / mp), dense and MLP-down row-parallel (input / mp), the
    # embedding vocabulary-parallel (v / mp), attention runs h / mp heads; norms and the residual
    # stream stay whole (no sequence parallelism).
    HF_EMBEDDING = "hf_embedding"  # fp32 nn.Embedding; backward is a dense fp32 [v, d] gradient
    HF_LAYERNORM = "hf_layernorm"  # fp32 LayerNorm on the fp32 residual stream (autocast keeps it fp32)
    HF_QKV = "hf_qkv"  # query_key_value: fp32 input and weights cast to bf16
    HF_ATTENTION = "hf_attention"  # split heads, partial rotary (fp32 cos/sin), sdpa causal, merge heads
    HF_DENSE = "hf_dense"  # attention output projection, bf16 input, fp32 weights
    HF_MLP_UP = "hf_mlp_up"  # dense_h_to_4h: fp32 input (post-attention LayerNorm)
    HF_MLP_DOWN = "hf_mlp_down"  # dense_4h_to_h: bf16 input (GeLU output)
    HF_RESIDUAL = "hf_residual"  # parallel residual: mlp(bf16) + attn(bf16) + hidden(fp32) -> fp32
    HF_LM_HEAD = "hf_lm_head"  # embed_out: fp32 input, fp32 weight cast to bf16, no bias
    HF_LOSS = "hf_loss"  # logits.float(), shift labels, cross-entropy (mean)
    HF_GRAD_ACCUM = "hf_grad_accum"  # fp32 .grad += new grad over all parameters (micro-batches 2..m)
    HF_OPTIMIZER = "hf_optimizer"  # fused AdamW step over all fp32 parameters + zero_grad(set_to_none)
    # autocast's fp32 -> bf16 copy of one [f, d] weight (features d*f). The recompute of a
    # checkpointed GPT-NeoX layer stops early (torch.utils.checkpoint, non-reentrant): it
    # casts dense_4h_to_h's weight but never runs that GEMM nor the residual add.
    HF_WEIGHT_CAST = "hf_weight_cast"
    # LLaMA-family MLP: SiLU(gate) * up over the fused gate-and-up GEMM's 2f/mp outputs
    SWIGLU = "swiglu"
    # training.precision fp8 (Transformer Engine): the encoder GEMMs on FP8 inputs (E4M3 forward,
    # E5M2 gradients) with bf16 outputs, and the scaled cast that quantizes each GEMM input
    # (features: tensor elements on one rank; its backward casts the GEMM's output gradient)
    FP8_LINEAR1 = "fp8_linear1"
    FP8_LINEAR2 = "fp8_linear2"
    FP8_LINEAR3 = "fp8_linear3"
    FP8_LINEAR4 = "fp8_linear4"
    FP8_CAST = "fp8_cast"
    # training.kernels fused (Megatron-Core with Transformer Engine): the same operators as one
    # generated kernel each (measured as torch.compile's Triton kernels, the stand-in for TE's and
    # Apex's hand-fused ones): RoPE on q and k, SwiGLU, and the FP8 scaled cast (amax reduction,
    # then the cast and its transposed copy, TE's cast_transpose on Hopper). Same features, FLOPs
    # and bytes (a lower bound either way) as the eager kind they fuse. (RMSNorm has no
    # fused kind: torch's F.rms_norm, the eager kind, is already one kernel, faster than
    # Inductor's dynamic-shape one.)
    ROPE_FUSED = "rope_fused"
    SWIGLU_FUSED = "swiglu_fused"
    FP8_CAST_FUSED = "fp8_cast_fused"

    @property
    def is_optimizer(self) -> bool:
        """Kinds with one per-update duration (direction "update") rather than fwd/bwd."""
        return self in _UPDATE_KINDS


_UPDATE_KINDS = frozenset({OpKind.OPTIMIZER_FIRST, OpKind.OPTIMIZER_MIDDLE, OpKind.OPTIMIZER_LAST,
                           OpKind.HF_GRAD_ACCUM, OpKind.HF_OPTIMIZER})


#: Table I feature names per operator kind.
FEATURE_NAMES: dict[OpKind, tuple[str, ...]] = {
    OpKind.EMBEDDING: ("b*l", "v/mp", "d"),
    OpKind.LAYERNORM: ("b", "l", "d"),
    OpKind.RMSNORM: ("b", "l", "d"),
    OpKind.RES_ADD: ("b", "l", "d"),
    OpKind.LINEAR1: ("b*l", "d", "qkv/mp"),  # qkv = 3d with multi-head attention
    OpKind.ROPE: ("b", "l", "h/mp", "d/h"),
    OpKind.BADDBMM: ("b*h/mp", "l", "d/h", "l"),
    OpKind.FILLMASK: ("b", "h/mp", "l", "d"),
    OpKind.SOFTMAX: ("b", "h/mp", "l", "l"),
    OpKind.FUSED_SOFTMAX: ("b*h/mp", "l", "l"),
    OpKind.ATTN_DROPOUT: ("b*h/mp", "l", "l"),
    OpKind.BMM: ("b*h/mp", "l", "l", "d/h"),
    OpKind.FLASH_ATTN: ("b", "l", "h/mp", "d/h"),
    OpKind.LINEAR2: ("b*l", "d/mp", "d"),
    OpKind.LINEAR3: ("b*l", "d", "f/mp"),
    OpKind.GELU: ("b", "l", "f/mp"),
    OpKind.SWIGLU: ("b", "l", "f/mp"),
    OpKind.LINEAR4: ("b*l", "f/mp", "d"),
    OpKind.FP8_LINEAR1: ("b*l", "d", "qkv/mp"),
    OpKind.FP8_LINEAR2: ("b*l", "d/mp", "d"),
    OpKind.FP8_LINEAR3: ("b*l", "d", "f/mp"),
    OpKind.FP8_LINEAR4: ("b*l", "f/mp", "d"),
    OpKind.FP8_CAST: ("b*l*d",),
    OpKind.ROPE_FUSED: ("b", "l", "h/mp", "d/h"),
    OpKind.SWIGLU_FUSED: ("b", "l", "f/mp"),
    OpKind.FP8_CAST_FUSED: ("b*l*d",),
    OpKind.LINEAR_FINAL: ("b*l", "d", "v/mp"),
    OpKind.CROSS_ENTROPY: ("b", "l", "v/mp"),
    OpKind.OPTIMIZER_FIRST: ("mp", "d", "encoders"),
    OpKind.OPTIMIZER_MIDDLE: ("mp", "d", "encoders"),
    OpKind.OPTIMIZER_LAST: ("mp", "d", "encoders"),
    # The hf kinds end with their amount of work (elements or multiply-adds): a tree regressor
    # splits on it directly, which interpolates far better between sampled shapes than the
    # raw dimensions alone (held-out validation MAPE 8.4% -> see docs/h100.md).
    OpKind.HF_EMBEDDING: ("b*l", "v/mp", "d", "b*l*d"),
    OpKind.HF_LAYERNORM: ("b", "l", "d", "b*l*d"),
    OpKind.HF_QKV: ("b*l", "d", "3d/mp", "b*l*d*3d/mp"),
    OpKind.HF_ATTENTION: ("b", "l", "h/mp", "d/h", "b*l*l*d/mp"),
    OpKind.HF_DENSE: ("b*l", "d/mp", "d", "b*l*d*d/mp"),
    OpKind.HF_MLP_UP: ("b*l", "d", "f/mp", "b*l*d*f/mp"),
    OpKind.HF_MLP_DOWN: ("b*l", "f/mp", "d", "b*l*f*d/mp"),
    OpKind.HF_RESIDUAL: ("b", "l", "d", "b*l*d"),
    OpKind.HF_LM_HEAD: ("b*l", "d", "v/mp", "b*l*d*v/mp"),
    OpKind.HF_LOSS: ("b", "l", "v/mp", "b*l*v/mp"),
    OpKind.HF_WEIGHT_CAST: ("d*f/mp",),
    OpKind.HF_GRAD_ACCUM: ("params",),
    OpKind.HF_OPTIMIZER: ("params",),
}


#: How an operator's work grows with each of its Table I features (work ∝ Π feature^exponent, from
#: the FLOP and byte counts below): where an asked feature lies above the sampled range, a profile
#: scales the duration at the range's edge by the work's growth (the efficiency stays the edge's).
#: Every feature not listed here counts with exponent 1 (a product of sizes); the hf kinds carry
#: their work as their last feature.
_WORK_EXPONENTS: dict[OpKind, tuple[float, ...]] = {
    OpKind.EMBEDDING: (1.0, 0.0, 1.0),  # a gather of b*l rows of d; the vocabulary only sizes the table
    OpKind.FILLMASK: (1.0, 1.0, 2.0, 0.0),  # a b x h/mp x l x l mask
    OpKind.FLASH_ATTN: (1.0, 2.0, 1.0, 1.0),  # b * l^2 * h/mp * d/h
    OpKind.OPTIMIZER_FIRST: (-1.0, 2.0, 1.0),  # encoders * d^2 / mp parameters
    OpKind.OPTIMIZER_MIDDLE: (-1.0, 2.0, 1.0),
    OpKind.OPTIMIZER_LAST: (-1.0, 2.0, 1.0),
}


def work_exponents(kind: OpKind) -> tuple[float, ...]:
    """Exponents of the work in each feature of ``kind`` (see ``_WORK_EXPONENTS``)."""
    kind = UNFUSED_OF.get(kind, kind)
    if kind in _WORK_EXPONENTS:
        return _WORK_EXPONENTS[kind]
    n = len(FEATURE_NAMES[kind])
    if kind.value.startswith("hf_") and n > 1:
        return (0.0,) * (n - 1) + (1.0,)
    return (1.0,) * n


@dataclass(frozen=True, slots=True)
class Op:
    """One operator at one shape, on one MP rank.

    ``d`` is the full hidden size, ``h`` all heads, ``v`` the padded vocabulary
    (Eq. 2), ``f`` the MLP width (4d for the paper's models); per-rank sizes are
    derived by dividing by ``mp``. ``layers`` is the encoder count for optimizers.
    ``kv`` is the key/value heads of the QKV projection (0: ``h``); for ``fp8_cast`` ``d`` is the
    width of the tensor it quantizes (already per rank).
    """

    kind: OpKind
    b: int = 1
    l: int = 1  # noqa: E741 - the paper's name for sequence length
    d: int = 1
    h: int = 1
    mp: int = 1
    v: int = 1
    f: int = 0  # MLP width; 0 means 4d
    layers: int = 0
    kv: int = 0  # key/value heads; 0 means h

    @property
    def ffn(self) -> int:
        return self.f or 4 * self.d

    @property
    def qkv(self) -> int:
        """QKV output width over all ranks (3d for multi-head attention); replicated key/value
        heads (kv < mp) count once per rank."""
        if not self.kv or self.kv == self.h:
            return 3 * self.d
        return self.d + 2 * max(self.kv, self.mp) * (self.d // self.h)


def hf_params(op: Op) -> int:
    """Parameters of a Hugging Face GPT-NeoX model on one tensor-parallel rank (untied embed_in /
    embed_out, biases, final norm).

    Update kinds carry the model as ``d``, ``layers``, ``v`` (and ``f``) and the tensor-parallel
    degree as ``mp``: column-parallel weights and biases (QKV, MLP-up, LM head) and row-parallel
    weights (dense, MLP-down) and the embedding are split ``mp`` ways; norms and the row-parallel
    biases are whole on every rank. ``mp = 1``: the whole model on one GPU.
    """
    d, f, v, mp = op.d, op.ffn, op.v, op.mp
    norms = 2 * (2 * d)
    qkv = 3 * d * (d + 1) // mp
    dense = d * d // mp + d
    mlp = f * (d + 1) // mp + d * f // mp + d
    per_layer = norms + qkv + dense + mlp
    return op.layers * per_layer + 2 * v * d // mp + 2 * d


def _tokens(o: Op) -> float:
    return float(o.b) * o.l


_HF_FEATURES = {
    OpKind.HF_EMBEDDING: lambda o: (o.b * o.l, o.v / o.mp, o.d, _tokens(o) * o.d),
    OpKind.HF_LAYERNORM: lambda o: (o.b, o.l, o.d, _tokens(o) * o.d),
    OpKind.HF_RESIDUAL: lambda o: (o.b, o.l, o.d, _tokens(o) * o.d),
    OpKind.HF_QKV: lambda o: (o.b * o.l, o.d, 3 * o.d / o.mp, _tokens(o) * o.d * 3 * o.d / o.mp),
    OpKind.HF_ATTENTION: lambda o: (o.b, o.l, o.h / o.mp, o.d / o.h, _tokens(o) * o.l * o.d / o.mp),
    OpKind.HF_DENSE: lambda o: (o.b * o.l, o.d / o.mp, o.d, _tokens(o) * o.d * o.d / o.mp),
    OpKind.HF_MLP_UP: lambda o: (o.b * o.l, o.d, o.ffn / o.mp, _tokens(o) * o.d * o.ffn / o.mp),
    OpKind.HF_MLP_DOWN: lambda o: (o.b * o.l, o.ffn / o.mp, o.d, _tokens(o) * o.ffn * o.d / o.mp),
    OpKind.HF_LM_HEAD: lambda o: (o.b * o.l, o.d, o.v / o.mp, _tokens(o) * o.d * o.v / o.mp),
    OpKind.HF_LOSS: lambda o: (o.b, o.l, o.v / o.mp, _tokens(o) * o.v / o.mp),
    OpKind.HF_WEIGHT_CAST: lambda o: (o.d * o.ffn / o.mp,),
    OpKind.HF_GRAD_ACCUM: lambda o: (hf_params(o),),
    OpKind.HF_OPTIMIZER: lambda o: (hf_params(o),),
}


def features(op: Op) -> tuple[float, ...]:
    """The paper's Table I feature vector of an operator."""
    if op.kind in UNFUSED_OF:
        return features(eager_op(op))
    b, l, d, h, mp, v, f = op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    k = op.kind
    if k is OpKind.EMBEDDING:
        return (b * l, v / mp, d)
    if k in (OpKind.LAYERNORM, OpKind.RMSNORM, OpKind.RES_ADD):
        return (b, l, d)
    k = _BF16_OF.get(k, k)
    if k is OpKind.LINEAR1:
        return (b * l, d, op.qkv / mp)
    if k is OpKind.ROPE:
        return (b, l, h / mp, d / h)
    if k is OpKind.BADDBMM:
        return (b * h / mp, l, d / h, l)
    if k is OpKind.FILLMASK:
        return (b, h / mp, l, d)
    if k is OpKind.SOFTMAX:
        return (b, h / mp, l, l)
    if k in (OpKind.FUSED_SOFTMAX, OpKind.ATTN_DROPOUT):
        return (b * h / mp, l, l)
    if k is OpKind.BMM:
        return (b * h / mp, l, l, d / h)
    if k is OpKind.FLASH_ATTN:
        return (b, l, h / mp, d / h)
    if k is OpKind.LINEAR2:
        return (b * l, d / mp, d)
    if k is OpKind.LINEAR3:
        return (b * l, d, f / mp)
    if k in (OpKind.GELU, OpKind.SWIGLU):
        return (b, l, f / mp)
    if k is OpKind.FP8_CAST:
        return (float(b) * l * d,)
    if k is OpKind.LINEAR4:
        return (b * l, f / mp, d)
    if k is OpKind.LINEAR_FINAL:
        return (b * l, d, v / mp)
    if k is OpKind.CROSS_ENTROPY:
        return (b, l, v / mp)
    if k in _HF_FEATURES:
        return _HF_FEATURES[k](op)
    if k.is_optimizer:
        return (mp, d, op.layers)
    raise AssertionError(f"no features for {k}")  # pragma: no cover - enum is closed


def forward_flops(op: Op) -> float:
    """Floating-point operations of the forward pass on one MP rank."""
    b, l, d, h, mp, v, f = op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    if op.kind in UNFUSED_OF:
        return forward_flops(eager_op(op))
    k = _BF16_OF.get(op.kind, op.kind)
    tokens = b * l
    if k is OpKind.LINEAR1:
        return 2.0 * tokens * d * op.qkv / mp
    if k is OpKind.LINEAR2:
        return 2.0 * tokens * d / mp * d
    if k is OpKind.LINEAR3:
        return 2.0 * tokens * d * f / mp
    if k is OpKind.LINEAR4:
        return 2.0 * tokens * f / mp * d
    if k is OpKind.LINEAR_FINAL:
        return 2.0 * tokens * d * v / mp
    if k in (OpKind.BADDBMM, OpKind.BMM):
        return 2.0 * b * (h / mp) * l * l * (d / h)
    if k is OpKind.FLASH_ATTN:  # QK^T and .V, causal mask halves the work
        return 2.0 * 2.0 * b * (h / mp) * l * l * (d / h) / 2.0
    if k in (OpKind.SOFTMAX, OpKind.FUSED_SOFTMAX, OpKind.FILLMASK):
        return 5.0 * b * (h / mp) * l * l
    if k is OpKind.ATTN_DROPOUT:  # a draw, a compare and a scale per score
        return 3.0 * b * (h / mp) * l * l
    if k in (OpKind.LAYERNORM, OpKind.RMSNORM):
        return 8.0 * tokens * d
    if k is OpKind.RES_ADD:
        return 1.0 * tokens * d
    if k is OpKind.GELU:
        return 8.0 * tokens * f / mp
    if k is OpKind.SWIGLU:  # sigmoid, two products
        return 6.0 * tokens * f / mp
    if k is OpKind.FP8_CAST:  # absolute maximum, scale
        return 2.0 * tokens * d
    if k is OpKind.ROPE:
        return 3.0 * tokens * d / mp
    if k is OpKind.CROSS_ENTROPY:
        return 5.0 * tokens * v / mp
    if k is OpKind.EMBEDDING:
        return 0.0
    if k.is_optimizer:
        return 0.0
    if k is OpKind.HF_QKV:
        return 2.0 * tokens * d * 3 * d / mp
    if k is OpKind.HF_DENSE:
        return 2.0 * tokens * d * d / mp
    if k in (OpKind.HF_MLP_UP, OpKind.HF_MLP_DOWN):
        return 2.0 * tokens * d * f / mp
    if k is OpKind.HF_LM_HEAD:
        return 2.0 * tokens * d * v / mp
    if k is OpKind.HF_ATTENTION:  # sdpa with the causal mask; the rotary is negligible
        return 2.0 * b * l * l * d / mp
    if k is OpKind.HF_LAYERNORM:
        return 8.0 * tokens * d
    if k is OpKind.HF_RESIDUAL:
        return 2.0 * tokens * d
    if k is OpKind.HF_LOSS:
        return 5.0 * tokens * v / mp
    if k in (OpKind.HF_EMBEDDING, OpKind.HF_WEIGHT_CAST):
        return 0.0
    raise AssertionError(k)  # pragma: no cover


def flops(op: Op, direction: Direction) -> float:
    """FLOPs for a direction: GEMM-like backward is twice the forward (dX and dW). A residual add's
    backward computes nothing: autograd hands the output gradient to both inputs (measured GPU-only
    on the H100: 1.3 us at any shape; :func:`bytes_moved` is 0 too)."""
    fwd = forward_flops(op)
    if direction is Direction.FWD:
        return fwd
    if direction is Direction.BWD:
        return 0.0 if op.kind is OpKind.RES_ADD else 2.0 * fwd
    return 0.0


def bytes_moved(op: Op, direction: Direction, elem_bytes: int = 2) -> float:
    """A lower bound on device-memory traffic (read inputs and weights, write outputs)."""
    if op.kind in UNFUSED_OF:
        return bytes_moved(eager_op(op), direction, elem_bytes)
    b, l, d, h, mp, v, f = op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    k = op.kind
    tokens = b * l
    scale = 1.0 if direction is Direction.FWD else 2.0
    if k in _BF16_OF:  # FP8 inputs and weights (1 byte), bf16 output
        gemm = dataclasses.replace(op, kind=_BF16_OF[k])
        return bytes_moved(gemm, direction, elem_bytes) * 0.5 + scale * tokens * _gemm_out(gemm)
    if k is OpKind.FP8_CAST:  # read bf16, write fp8 (and the absolute maximum)
        return scale * 3.0 * tokens * d
    if k is OpKind.LINEAR1:
        n = tokens * d + d * op.qkv / mp + tokens * op.qkv / mp
    elif k is OpKind.LINEAR2:
        n = tokens * d / mp + d * d / mp + tokens * d
    elif k is OpKind.LINEAR3:
        n = tokens * d + d * f / mp + tokens * f / mp
    elif k is OpKind.LINEAR4:
        n = tokens * f / mp + d * f / mp + tokens * d
    elif k is OpKind.LINEAR_FINAL:
        n = tokens * d + d * v / mp + tokens * v / mp
    elif k in (OpKind.BADDBMM, OpKind.BMM):
        n = 2 * b * h / mp * l * d / h + b * h / mp * l * l
    elif k is OpKind.FLASH_ATTN:
        n = 4 * tokens * d / mp
    elif k in (OpKind.SOFTMAX, OpKind.FUSED_SOFTMAX, OpKind.FILLMASK):
        n = 2 * b * h / mp * l * l
    elif k is OpKind.ATTN_DROPOUT:  # scores in and out, the 1-byte mask written (read back in backward)
        n = 2.5 * b * h / mp * l * l
    elif k in (OpKind.LAYERNORM, OpKind.RMSNORM):
        n = 2 * tokens * d
    elif k is OpKind.ROPE:  # q and k of one rank's h/mp heads, each read and written
        n = 4 * tokens * d / mp
    elif k is OpKind.RES_ADD and direction is Direction.BWD:  # autograd hands the output gradient to both inputs
        return 0.0
    elif k is OpKind.RES_ADD:
        n = 3 * tokens * d
    elif k is OpKind.GELU:
        n = 2 * tokens * f / mp
    elif k is OpKind.SWIGLU:
        n = 3 * tokens * f / mp
    elif k is OpKind.CROSS_ENTROPY:
        n = 2 * tokens * v / mp
    elif k is OpKind.EMBEDDING:
        n = 2 * tokens * d
    elif k in _HF_BYTES:
        return scale * _HF_BYTES[k](op)
    elif k is OpKind.HF_GRAD_ACCUM:  # read two fp32 gradients, write one
        return 12.0 * hf_params(op)
    elif k is OpKind.HF_OPTIMIZER:  # param, grad, two moments read; param, moments written (fp32)
        return 28.0 * hf_params(op)
    elif k.is_optimizer:
        # fp32 master weights, two Adam moments, fp32 grads: read+write ~ 16 bytes each per
        # parameter; parameter count of ``layers`` encoders (Eq. 6) on one MP rank.
        params = op.layers * (4 * d + 8 * d * (d + 1) / mp + d * (4 * d + 1) / mp)
        return 2 * 16.0 * params
    else:  # pragma: no cover
        raise AssertionError(k)
    return scale * n * elem_bytes


#: each FP8 GEMM kind and the bf16 GEMM whose shape, features and FLOPs it has
_BF16_OF = {OpKind.FP8_LINEAR1: OpKind.LINEAR1, OpKind.FP8_LINEAR2: OpKind.LINEAR2,
            OpKind.FP8_LINEAR3: OpKind.LINEAR3, OpKind.FP8_LINEAR4: OpKind.LINEAR4}
FP8_OF = {bf16: fp8 for fp8, bf16 in _BF16_OF.items()}
#: the GEMMs on FP8 inputs (their tensor cores and power draw are FP8's)
FP8_GEMM_KINDS = frozenset(_BF16_OF)

#: each eager kind that ``training.kernels: fused`` replaces, and its fused kind
FUSED_OF = {OpKind.ROPE: OpKind.ROPE_FUSED, OpKind.SWIGLU: OpKind.SWIGLU_FUSED, OpKind.FP8_CAST: OpKind.FP8_CAST_FUSED}
UNFUSED_OF = {fused: eager for eager, fused in FUSED_OF.items()}
#: the FP8 cast kinds (eager and fused): sampled at several widths per point, benched without autograd
FP8_CAST_KINDS = (OpKind.FP8_CAST, OpKind.FP8_CAST_FUSED)


def fused_op(op: Op) -> Op:
    """``op`` as its fused kind (``training.kernels: fused``) where it has one."""
    return dataclasses.replace(op, kind=FUSED_OF[op.kind]) if op.kind in FUSED_OF else op


def eager_op(op: Op) -> Op:
    """``op`` as the eager kind it fuses (same shape, features, FLOPs and bytes) where it is fused."""
    return dataclasses.replace(op, kind=UNFUSED_OF[op.kind]) if op.kind in UNFUSED_OF else op


def _gemm_out(op: Op) -> float:
    """Output width of a GEMM kind on one rank."""
    return {OpKind.LINEAR1: op.qkv / op.mp, OpKind.LINEAR2: op.d, OpKind.LINEAR3: op.ffn / op.mp,
            OpKind.LINEAR4: op.d}[op.kind]


def _hf_linear_bytes(tokens: int, k_in: int, n_out: int, in_bytes: int) -> float:
    # input (fp32 or bf16), the fp32 weight read and cast (4 + 2 + 2 bytes), the bf16 output
    return tokens * k_in * in_bytes + 8.0 * k_in * n_out + 2.0 * tokens * n_out


_HF_BYTES = {
    OpKind.HF_EMBEDDING: lambda o: 8.0 * o.b * o.l * o.d,
    OpKind.HF_LAYERNORM: lambda o: 8.0 * o.b * o.l * o.d,
    OpKind.HF_RESIDUAL: lambda o: 12.0 * o.b * o.l * o.d,
    OpKind.HF_QKV: lambda o: _hf_linear_bytes(o.b * o.l, o.d, 3 * o.d // o.mp, 4),
    OpKind.HF_DENSE: lambda o: _hf_linear_bytes(o.b * o.l, o.d // o.mp, o.d, 2),
    OpKind.HF_MLP_UP: lambda o: _hf_linear_bytes(o.b * o.l, o.d, o.ffn // o.mp, 4),
    OpKind.HF_MLP_DOWN: lambda o: _hf_linear_bytes(o.b * o.l, o.ffn // o.mp, o.d, 2),
    OpKind.HF_LM_HEAD: lambda o: _hf_linear_bytes(o.b * o.l, o.d, o.v // o.mp, 4),
    OpKind.HF_ATTENTION: lambda o: 2.0 * (3 + 2 + 1) * o.b * o.l * o.d / o.mp,
    OpKind.HF_LOSS: lambda o: 8.0 * o.b * o.l * o.v / o.mp,
    OpKind.HF_WEIGHT_CAST: lambda o: 6.0 * o.d * o.ffn / o.mp,
}


class CollKind(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    P2P = "p2p"


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective call over a group spanning ``nodes`` x ``gpus_per_node`` GPUs.

    ``entries`` counts 2-byte elements (fp16/bf16), the unit of the samples. For an
    all-gather it is the per-rank shard, as the reference samples it; for P2P the
    message.
    """

    kind: CollKind
    entries: int
    nodes: int
    gpus_per_node: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def bytes(self) -> int:
        return 2 * self.entries
