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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind, hf_params
from trainsim.operators.partition import padded_vocab
from trainsim.operators.spec import ModelSpec, Parallelism, TrainingSpec
from trainsim.operators.stages import build_stage_plans

HF_KINDS = tuple(k for k in OpKind if k.value.startswith("hf_"))
MEGATRON_KINDS = tuple(k for k in OpKind if k not in HF_KINDS)
HF_VOCAB = 50432  # GPT-NeoX-20B's padded vocabulary, as the validation model uses
TOKENS_MAX = 40960  # b * l, the paper's largest (8 x 5120)

B_CHOICES = (1, 2, 4, 8, 16)
MP_CHOICES = (1, 2, 4, 8, 16)


def directions(kind: OpKind) -> tuple[Direction, ...]:
    return (Direction.UPDATE,) if kind.is_optimizer else (Direction.FWD, Direction.BWD)


def parse_kinds(text: str | None) -> tuple[OpKind, ...]:
    """``--ops linear1,gelu`` (or ``hf`` / ``megatron`` / ``all``) to operator kinds."""
    if not text or text == "all":
        return tuple(OpKind)
    out: list[OpKind] = []
    for name in (t.strip() for t in text.split(",") if t.strip()):
        if name == "hf":
            out += HF_KINDS
        elif name == "megatron":
            out += MEGATRON_KINDS
        else:
            try:
                out.append(OpKind(name))
            except ValueError:
                known = ", ".join(k.value for k in OpKind)
                raise ConfigError("--ops", f"unknown operator {name!r}; known: hf, megatron, {known}") from None
    return tuple(dict.fromkeys(out))


def peak_bytes(op: Op) -> float:
    """A generous estimate of the device memory one benchmark of ``op`` needs (backward included)."""
    b, l, d, h, mp, v, f = op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    k = op.kind
    if k in (OpKind.HF_OPTIMIZER, OpKind.HF_GRAD_ACCUM):
        return 20.0 * hf_params(op)
    if k.is_optimizer:
        vv = v if v > 1 else padded_vocab(50257, mp)
        return 20.0 * (op.layers * 12 * d * d / mp + 2 * vv * d / mp)
    scores = b * max(h // mp, 1) * l * l
    tokens = b * l
    if k in (OpKind.BADDBMM, OpKind.BMM, OpKind.SOFTMAX, OpKind.FILLMASK, OpKind.FUSED_SOFTMAX):
        return 2.0 * 8 * scores
    if k in (OpKind.LINEAR_FINAL, OpKind.CROSS_ENTROPY):
        return 16.0 * tokens * v / mp + 6.0 * d * v / mp
    if k in (OpKind.HF_LM_HEAD, OpKind.HF_LOSS):
        return 20.0 * tokens * v / mp + 16.0 * d * v / mp
    if k in (OpKind.EMBEDDING, OpKind.HF_EMBEDDING):
        return 8.0 * v * d / mp + 16.0 * tokens * d
    if k is OpKind.HF_WEIGHT_CAST:
        return 12.0 * d * f / mp
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
    v = HF_VOCAB if kind.value.startswith("hf_") else padded_vocab(50257, mp)
    return Op(kind, b=b, l=l, d=d, h=h, mp=mp, v=v)


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
) -> list[tuple[Op, Direction]]:
    """The ordered measurement plan: ``include`` first, then Sobol points, each point over all kinds.

    ``budget`` caps the number of (operator, direction) rows; without it ``points``
    Sobol points (default 256) are used. Shapes over ``max_bytes`` are skipped.
    """
    kinds = tuple(kinds) if kinds else tuple(OpKind)
    if budget is not None and budget < 1:
        raise ConfigError("--budget", f"must be a positive number of samples, got {budget}")
    wanted = set(kinds)
    plan: list[tuple[Op, Direction]] = [(o, dd) for o, dd in include if o.kind in wanted and peak_bytes(o) <= max_bytes]
    if points is None:
        per_point = sum(len(directions(k)) for k in kinds)
        points = 256 if budget is None else max(1, math.ceil(max(budget - len(plan), 0) / max(per_point, 1)) + 1)
    for b, l, d, h, mp, layers in sobol_points(points, seed):
        for kind in kinds:
            op = op_for(kind, b, l, d, h, mp, layers, hf_tp)
            if peak_bytes(op) > max_bytes:
                continue
            plan.extend((op, dd) for dd in directions(kind))
    plan = list(dict.fromkeys(plan))
    return plan[:budget] if budget is not None else plan
