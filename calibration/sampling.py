"""Which shapes to measure: a seeded, space-filling plan over the paper's ranges.

The paper (method.md, Table VI) samples a full grid: mp 1..16 (x2), b 4..8, h 16..80
(+8), l 1024..5120 (+512), d 2048..8192 (+512). We keep its upper ends, extend the
lower ones to small models (d from 512, l from 256, b from 1) and draw a scrambled
Sobol sequence over (b, l, d, head_dim, mp, layers) instead of a grid, so any prefix
of the plan covers the whole box evenly: a budget cut keeps the plan space-filling.

Each point is mapped onto the legal grid: l a multiple of 256, d a multiple of 512,
head_dim 64 or 128 (h = d / head_dim), mp a power of two dividing h, b a power of
two. Points whose tensors would not fit in ``max_bytes`` are dropped (a 16 x 80-head
5120^2 softmax would need over 100 GB).

Exact operators of chosen configurations (e.g. the H100 validation runs) can be put
at the front of the plan with ``include``; see docs/h100.md for why that is fair and
for the held-out check.

``swiglu`` and the FP8 kinds (``fp8_linear1..4``, ``fp8_cast``; ``--ops fp8`` names all five) are
measured only when named in ``--ops``: the default plan (and ``all``, ``megatron``) keeps the kinds
and row order it had before them. They take the shapes of their bf16 counterparts (``gelu``;
``linear1..4``), the FP8 GEMMs with every dimension a multiple of 16 (already true on this grid;
:func:`fp8_point` rounds a point up otherwise); ``fp8_cast`` is sampled at each width an encoder
GEMM's input or output gradient has (d, d/mp, f/mp, qkv/mp and SwiGLU's 2f/mp) times b*l, in both
directions (forward float8_e4m3fn, backward float8_e5m2).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import FP8_CAST_KINDS, FUSED_OF, UNFUSED_OF, Direction, Op, OpKind, eager_op, hf_params
from trainsim.operators.partition import padded_vocab
from trainsim.operators.spec import ModelSpec, Parallelism, TrainingSpec
from trainsim.operators.stages import build_stage_plans

FP8_KINDS = (OpKind.FP8_LINEAR1, OpKind.FP8_LINEAR2, OpKind.FP8_LINEAR3, OpKind.FP8_LINEAR4, OpKind.FP8_CAST)
FUSED_KINDS = tuple(FUSED_OF.values())
#: kinds measured only when --ops names them (not in the default plan, nor in all / megatron)
OPT_IN_KINDS = (OpKind.SWIGLU, OpKind.ATTN_DROPOUT, *FP8_KINDS, *FUSED_KINDS)
HF_KINDS = tuple(k for k in OpKind if k.value.startswith("hf_"))
MEGATRON_KINDS = tuple(k for k in OpKind if k not in HF_KINDS and k not in OPT_IN_KINDS)
DEFAULT_KINDS = tuple(k for k in OpKind if k not in OPT_IN_KINDS)
FP8_ALIGN = 16  # every dimension of an FP8 GEMM (torch._scaled_mm / cuBLASLt)
HF_VOCAB = 50432  # GPT-NeoX-20B's padded vocabulary, as the validation model uses
TOKENS_MAX = 40960  # b * l, the paper's largest (8 x 5120)

B_CHOICES = (1, 2, 4, 8, 16)
MP_CHOICES = (1, 2, 4, 8, 16)


def directions(kind: OpKind) -> tuple[Direction, ...]:
    return (Direction.UPDATE,) if kind.is_optimizer else (Direction.FWD, Direction.BWD)


def parse_kinds(text: str | None) -> tuple[OpKind, ...]:
    """``--ops linear1,gelu`` (or ``hf`` / ``megatron`` / ``fp8`` / ``all``) to operator kinds.

    ``all`` (the default) is every kind but :data:`OPT_IN_KINDS`, which must be named."""
    if not text or text == "all":
        return DEFAULT_KINDS
    out: list[OpKind] = []
    for name in (t.strip() for t in text.split(",") if t.strip()):
        if name == "hf":
            out += HF_KINDS
        elif name == "megatron":
            out += MEGATRON_KINDS
        elif name == "fp8":
            out += FP8_KINDS
        elif name == "fused":
            out += FUSED_KINDS
        elif name == "all":
            out += DEFAULT_KINDS
        else:
            try:
                out.append(OpKind(name))
            except ValueError:
                known = ", ".join(k.value for k in OpKind)
                raise ConfigError("--ops", f"unknown operator {name!r}; known: all, hf, megatron, fp8, fused, "
                                           f"{known}") from None
    return tuple(dict.fromkeys(out))


def peak_bytes(op: Op) -> float:
    """A generous estimate of the device memory one benchmark of ``op`` needs (backward included)."""
    if op.kind in UNFUSED_OF:
        return peak_bytes(eager_op(op))
    b, l, d, h, mp, v, f = op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    k = op.kind
    if k in (OpKind.HF_OPTIMIZER, OpKind.HF_GRAD_ACCUM):
        return 20.0 * hf_params(op)
    if k.is_optimizer:
        vv = v if v > 1 else padded_vocab(50257, mp)
        return 20.0 * (op.layers * 12 * d * d / mp + 2 * vv * d / mp)
    scores = b * max(h // mp, 1) * l * l
    tokens = b * l
    if k in (OpKind.BADDBMM, OpKind.BMM, OpKind.SOFTMAX, OpKind.FILLMASK, OpKind.FUSED_SOFTMAX, OpKind.ATTN_DROPOUT):
        return 2.0 * 8 * scores
    if k in (OpKind.LINEAR_FINAL, OpKind.CROSS_ENTROPY):
        return 16.0 * tokens * v / mp + 6.0 * d * v / mp
    if k in (OpKind.HF_LM_HEAD, OpKind.HF_LOSS):
        return 20.0 * tokens * v / mp + 16.0 * d * v / mp
    if k in (OpKind.EMBEDDING, OpKind.HF_EMBEDDING):
        return 8.0 * v * d / mp + 16.0 * tokens * d
    if k is OpKind.HF_WEIGHT_CAST:
        return 12.0 * d * f / mp
    if k is OpKind.FP8_CAST:  # d is the tensor's width: bf16 input, fp8 output (a spare set)
        return 8.0 * tokens * d
    widest = max(3 * d, f) / mp
    return 24.0 * tokens * max(widest, d) + 12.0 * d * widest


def op_for(kind: OpKind, b: int, l: int, d: int, h: int, mp: int, layers: int, hf_tp: bool = False) -> Op:
    """The operator of ``kind`` at one sampled point (v = 50432 for the hf kinds, and mp = 1 unless
    ``hf_tp``: one rank of PyTorch's tensor-parallel plan)."""
    if kind.value.startswith("hf_") and not hf_tp:
        mp = 1
    if kind in (OpKind.HF_OPTIMIZER, OpKind.HF_GRAD_ACCUM):
        return Op(kind, d=d, v=HF_VOCAB, layers=layers, mp=mp)
    if kind.is_optimizer:
        return Op(kind, d=d, mp=mp, layers=layers)
    if kind in FP8_KINDS:
        l, d, h = fp8_point(b, l, d, h, mp)  # noqa: E741
    v = HF_VOCAB if kind.value.startswith("hf_") else padded_vocab(50257, mp)
    return Op(kind, b=b, l=l, d=d, h=h, mp=mp, v=v)


def fp8_point(b: int, l: int, d: int, h: int, mp: int) -> tuple[int, int, int]:
    """(l, d, h) rounded up so that every FP8 GEMM dimension (b*l, d, d/mp, f/mp = 4d/mp, qkv/mp =
    3d/mp) is a multiple of 16, keeping whole heads of the same size. No change on the Sobol grid
    (l a multiple of 256, d of 512, mp <= 16)."""
    hd = d // h
    step = math.lcm(FP8_ALIGN * mp, hd)
    d2 = -(-d // step) * step
    return -(-l // FP8_ALIGN) * FP8_ALIGN, d2, d2 // hd


def fp8_cast_widths(d: int, mp: int, f: int = 0, qkv: int = 0) -> tuple[int, ...]:
    """The per-rank widths of the tensors Transformer Engine casts to FP8 in one encoder: GEMM inputs
    (d, d/mp, f/mp) and output gradients (qkv/mp, d, f/mp or SwiGLU's 2f/mp), each once."""
    f = f or 4 * d
    qkv = qkv or 3 * d
    return tuple(dict.fromkeys((d, d // mp, f // mp, qkv // mp, 2 * f // mp)))


def ops_at(kind: OpKind, b: int, l: int, d: int, h: int, mp: int, layers: int, hf_tp: bool = False) -> list[Op]:
    """The operators of ``kind`` sampled at one point: :func:`op_for`'s one, or ``fp8_cast`` at each
    of :func:`fp8_cast_widths` (``Op.d`` is the cast tensor's width, as the stage plans build it). A
    fused kind is sampled at its eager kind's shapes."""
    if kind in UNFUSED_OF:
        return [dataclasses.replace(o, kind=kind) for o in ops_at(UNFUSED_OF[kind], b, l, d, h, mp, layers, hf_tp)]
    if kind is OpKind.FP8_CAST:
        return [Op(kind, b=b, l=l, d=w) for w in fp8_cast_widths(d, mp)]
    return [op_for(kind, b, l, d, h, mp, layers, hf_tp)]


def sobol_points(n: int, seed: int) -> list[tuple[int, int, int, int, int, int]]:
    """``n`` legal (b, l, d, h, mp, layers) points from a scrambled Sobol sequence."""
    from scipy.stats import qmc

    if n <= 0:
        return []
    m = max(1, math.ceil(math.log2(n)))
    u = qmc.Sobol(d=6, scramble=True, seed=seed).random_base2(m)[:n]
    out = []
    for ub, ul, ud, uh, ump, ulay in u:
        b = B_CHOICES[min(int(ub * len(B_CHOICES)), len(B_CHOICES) - 1)]
        l = 256 * (1 + min(int(ul * 20), 19))  # 256 .. 5120
        d = 512 * (1 + min(int(ud * 16), 15))  # 512 .. 8192
        hd = 64 if uh < 0.5 else 128
        h = d // hd
        mp = MP_CHOICES[min(int(ump * len(MP_CHOICES)), len(MP_CHOICES) - 1)]
        while h % mp:
            mp //= 2
        while b * l > TOKENS_MAX and b > 1:
            b //= 2
        layers = 1 + min(int(ulay * 12), 11)
        out.append((b, l, d, h, mp, layers))
    return out


#: the broad box (``--box broad``, issue 9): the shapes trained today, beyond the paper's box
BROAD_B = (1, 2, 4, 8, 16, 32, 64)
BROAD_KINDS = tuple(k for k in (*MEGATRON_KINDS, *OPT_IN_KINDS, *HF_KINDS)
                    # the unfused attention kinds hold b*h*l*l scores: flash attention at long sequences
                    if k not in (OpKind.BADDBMM, OpKind.BMM, OpKind.SOFTMAX, OpKind.FUSED_SOFTMAX, OpKind.FILLMASK,
                                 OpKind.ATTN_DROPOUT))
BROAD_MAX_FLOPS = 4e14  # per timed call (about 0.5 ms at the H100's dense bf16 peak): 20 calls a sample


def broad_ops(n: int, seed: int, kinds: Sequence[OpKind]) -> list[Op]:
    """Operators at ``n`` Sobol points of the broad box: hidden 1024-16384 (d/mp >= 512), sequence
    256-32768 (log-uniform, a multiple of 256), micro-batch 1-64, head dim 64 or 128, key/value heads
    1..h (GQA), MLP width 2.5-4 d (SwiGLU's 8/3 d and LLaMA's 3.5 d inside), vocabulary 32k-256k, mp
    1-8; the tokens b*l capped so that a GEMM call stays under :data:`BROAD_MAX_FLOPS` (a hidden size
    of 16384 is measured at fewer tokens, which its efficiency does not need).

    The Hugging Face kinds (``hf_*``: GPT-NeoX on one GPU) take the same point's b, l, d, h and
    vocabulary at mp = 1 (their model has a 4d MLP and as many key/value heads as heads), their
    tokens capped the same way for their own widest GEMM."""
    from scipy.stats import qmc

    if n <= 0:
        return []
    u = qmc.Sobol(d=8, scramble=True, seed=seed).random_base2(max(1, math.ceil(math.log2(n))))[:n]
    out: list[Op] = []
    for ub, ul, ud, uh, ump, ukv, uf, uv in u:
        b = BROAD_B[min(int(ub * len(BROAD_B)), len(BROAD_B) - 1)]
        l = 256 * round(2 ** (ul * 7))  # noqa: E741 - 256 .. 32768
        d = 1024 * (1 + min(int(ud * 16), 15))  # 1024 .. 16384
        hd = 64 if uh < 0.3 else 128
        h = d // hd
        mp = (1, 2, 4, 8)[min(int(ump * 4), 3)]
        while mp > 1 and (h % mp or d // mp < 512):
            mp //= 2
        kv = h if ukv < 0.3 else max(1, min(h, 2 ** int(ukv * 4)))  # h, or 1, 2, 4, 8 (GQA / MQA)
        while kv > 1 and h % kv:
            kv //= 2
        f = 256 * round(d * (2.5 + 1.5 * uf) / 256)
        v = 1024 * round(32 + uv * 224)  # 32k .. 256k
        hb, hl = _capped(b, l, d, max(4 * d, v))  # before the Megatron kinds' cap: from the point's own b, l
        b, l = _capped(b, l, d, max(3 * d, f, v) / mp)  # noqa: E741
        for kind in kinds:
            if kind in HF_KINDS:
                if kind in (OpKind.HF_OPTIMIZER, OpKind.HF_GRAD_ACCUM):
                    out.append(Op(kind, d=d, v=v, layers=1 + int(uv * 8), mp=1))
                else:
                    out.append(Op(kind, b=hb, l=hl, d=d, h=h, mp=1, v=v))
            elif kind in FP8_CAST_KINDS:
                out.extend(Op(kind, b=b, l=l, d=w) for w in fp8_cast_widths(d, mp, f, d + 2 * max(kv, mp) * hd))
            elif kind.is_optimizer:
                out.append(Op(kind, d=d, mp=mp, layers=1 + int(uv * 8)))
            else:
                gqa = kind in (OpKind.LINEAR1, OpKind.FP8_LINEAR1) and kv != h  # only the QKV GEMM sees kv
                out.append(Op(kind, b=b, l=l, d=d, h=h, mp=mp, v=v, f=f, kv=kv if gqa else 0))
    return out


def _capped(b: int, l: int, d: int, widest: float) -> tuple[int, int]:  # noqa: E741
    """(b, l) halved, b first, until a GEMM of ``b*l`` tokens by d by ``widest`` stays under
    :data:`BROAD_MAX_FLOPS` (never below 256 tokens)."""
    while b * l > 256 and 2.0 * b * l * d * widest > BROAD_MAX_FLOPS:
        if b > 1:
            b //= 2
        else:
            l //= 2  # noqa: E741
    return b, l


def config_ops(configs: Iterable[tuple[ModelSpec, TrainingSpec, Parallelism]]) -> list[tuple[Op, Direction]]:
    """Every (operator, direction) the stage plans of these configurations use, in plan order."""
    out: list[tuple[Op, Direction]] = []
    for model, training, par in configs:
        for plan in build_stage_plans(model, training, par):
            for oc in plan.forward:
                out.append((oc.op, Direction.FWD))
            for oc in plan.backward:
                out.append((oc.op, Direction.BWD))
            for oc in plan.recompute:
                out.append((oc.op, Direction.FWD))
            out.append((plan.optimizer, Direction.UPDATE))
            if plan.grad_accum is not None:
                out.append((plan.grad_accum, Direction.UPDATE))
    return list(dict.fromkeys(out))


def sampling_plan(
    kinds: Sequence[OpKind] | None = None,
    budget: int | None = None,
    seed: int = 0,
    include: Sequence[tuple[Op, Direction]] = (),
    max_bytes: float = 24e9,
    points: int | None = None,
    hf_tp: bool = False,
    box: str = "paper",
) -> list[tuple[Op, Direction]]:
    """The ordered measurement plan: ``include`` first, then Sobol points, each point over all kinds.

    ``budget`` caps the number of (operator, direction) rows; without it ``points``
    Sobol points (default 256) are used. Shapes over ``max_bytes`` are skipped.
    """
    kinds = tuple(kinds) if kinds else DEFAULT_KINDS
    if budget is not None and budget < 1:
        raise ConfigError("--budget", f"must be a positive number of samples, got {budget}")
    wanted = set(kinds)
    # a configuration's eager operator also gives its fused kind's shape when that kind is asked for,
    # and the other way round (an A/B of the two at the same shapes)
    twin = {**FUSED_OF, **UNFUSED_OF}
    include = [*include, *((dataclasses.replace(o, kind=twin[o.kind]), dd) for o, dd in include
                           if twin.get(o.kind) in wanted)]
    plan: list[tuple[Op, Direction]] = [(o, dd) for o, dd in include if o.kind in wanted and peak_bytes(o) <= max_bytes]
    if points is None:
        per_point = sum(len(directions(k)) * (5 if k in FP8_CAST_KINDS else 1) for k in kinds)
        points = 256 if budget is None else max(1, math.ceil(max(budget - len(plan), 0) / max(per_point, 1)) + 1)
    if box == "broad":
        plan.extend((op, dd) for op in broad_ops(points, seed, [k for k in kinds if k in BROAD_KINDS])
                    if peak_bytes(op) <= max_bytes for dd in directions(op.kind))
        plan = list(dict.fromkeys(plan))
        return plan[:budget] if budget is not None else plan
    if box != "paper":
        raise ConfigError("--box", f"must be paper or broad, got {box!r}")
    for b, l, d, h, mp, layers in sobol_points(points, seed):
        for kind in kinds:
            for op in ops_at(kind, b, l, d, h, mp, layers, hf_tp):
                if peak_bytes(op) <= max_bytes:
                    plan.extend((op, dd) for dd in directions(kind))
    plan = list(dict.fromkeys(plan))
    return plan[:budget] if budget is not None else plan
