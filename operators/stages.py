"""Per-stage forward/backward operator lists: the work of one micro-batch on one MP rank.

This is the decomposition the paper's predictor sums (Sec. III): each stage runs
its encoders' operators, the first stage also the embedding (and its MP
all-reduce), the last the final norm, LM head and vocab-parallel cross-entropy.
A full recompute re-runs every encoder's forward (and its MP all-reduces) inside
the backward. The PP send is described here by its size; which links it crosses
is the topology's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind, bytes_moved, flops, hf_params
from trainsim.operators.partition import StageRole, padded_vocab, partition_encoders, stage_params, stage_role
from trainsim.operators.spec import (
    Attention,
    Framework,
    ModelSpec,
    Norm,
    Parallelism,
    Recompute,
    TrainingSpec,
    check_model_fits,
)


@dataclass(frozen=True, slots=True)
class OpCount:
    op: Op
    count: int


@dataclass(frozen=True)
class StagePlan:
    """What one MP rank of pipeline stage ``index`` does per micro-batch, and per update."""

    index: int
    role: StageRole
    encoders: int
    forward: tuple[OpCount, ...]
    backward: tuple[OpCount, ...]  # gradient kernels, excluding recompute
    recompute: tuple[OpCount, ...]  # forward kernels re-run inside the backward
    mp_allreduces_fwd: int  # per micro-batch
    mp_allreduces_bwd: int  # per micro-batch, recompute's included
    mp_allreduce_entries: int  # b*l*d activations per all-reduce
    p2p_entries: int  # b*l*d/mp activations sent to the next stage (0 when pp == 1)
    params: int  # parameters held by one MP rank (Table III)
    optimizer: Op
    # framework "hf": fp32 gradient accumulation, run ``grad_accum_count`` (= m - 1) times per
    # update (the first micro-batch's gradients are assigned, not added). Direction "update".
    grad_accum: Op | None = None
    grad_accum_count: int = 0

    def distinct_ops(self) -> set[Op]:
        return {oc.op for oc in (*self.forward, *self.backward, *self.recompute)}

    def flops(self) -> tuple[float, float]:
        """Model FLOPs of one micro-batch (forward, backward), recompute excluded."""
        fwd = sum(oc.count * flops(oc.op, Direction.FWD) for oc in self.forward)
        bwd = sum(oc.count * flops(oc.op, Direction.BWD) for oc in self.backward)
        return fwd, bwd

    def bytes_moved(self, elem_bytes: int = 2) -> float:
        fwd = sum(oc.count * bytes_moved(oc.op, Direction.FWD, elem_bytes) for oc in self.forward)
        bwd = sum(oc.count * bytes_moved(oc.op, Direction.BWD, elem_bytes) for oc in self.backward)
        return fwd + bwd


def encoder_ops(model: ModelSpec, b: int, mp: int) -> list[Op]:
    """One encoder's operators in execution order (the reference's encoder function list)."""
    d, h, l, f = model.hidden, model.heads, model.seq_len, model.ffn

    def op(kind: OpKind) -> Op:
        return Op(kind, b=b, l=l, d=d, h=h, mp=mp, f=f if f != 4 * d else 0)

    norm = op(OpKind.LAYERNORM if model.norm is Norm.LAYERNORM else OpKind.RMSNORM)
    ops = [norm, op(OpKind.LINEAR1)]
    if model.rotary:
        ops.append(op(OpKind.ROPE))
    if model.attention is Attention.FLASH:
        ops.append(op(OpKind.FLASH_ATTN))
    elif model.attention is Attention.FUSED_SOFTMAX:
        ops += [op(OpKind.BADDBMM), op(OpKind.FUSED_SOFTMAX), op(OpKind.BMM)]
    else:
        ops += [op(OpKind.BADDBMM), op(OpKind.FILLMASK), op(OpKind.SOFTMAX), op(OpKind.BMM)]
    ops += [op(OpKind.LINEAR2), norm, op(OpKind.RES_ADD), op(OpKind.LINEAR3), op(OpKind.GELU),
            op(OpKind.LINEAR4), op(OpKind.RES_ADD)]
    return ops


def _counted(ops: list[Op], times: int) -> list[OpCount]:
    """Merge repeated operators (e.g. the two norms of an encoder) and scale by ``times``."""
    counts: dict[Op, int] = {}
    for o in ops:
        counts[o] = counts.get(o, 0) + times
    return [OpCount(o, c) for o, c in counts.items() if c]


def _merge(*groups: list[OpCount]) -> tuple[OpCount, ...]:
    counts: dict[Op, int] = {}
    for group in groups:
        for oc in group:
            counts[oc.op] = counts.get(oc.op, 0) + oc.count
    return tuple(OpCount(o, c) for o, c in counts.items() if c)


_OPTIMIZER_KIND = {
    StageRole.FIRST: OpKind.OPTIMIZER_FIRST,
    StageRole.ONLY: OpKind.OPTIMIZER_FIRST,
    StageRole.MIDDLE: OpKind.OPTIMIZER_MIDDLE,
    StageRole.LAST: OpKind.OPTIMIZER_LAST,
}


def hf_encoder_ops(model: ModelSpec, b: int) -> list[Op]:
    """One Hugging Face GPTNeoXLayer (parallel residual) in execution order, on one GPU."""
    d, h, l, f = model.hidden, model.heads, model.seq_len, model.ffn

    def op(kind: OpKind) -> Op:
        return Op(kind, b=b, l=l, d=d, h=h, f=f if f != 4 * d else 0)

    norm = op(OpKind.HF_LAYERNORM)
    return [norm, op(OpKind.HF_QKV), op(OpKind.HF_ATTENTION), op(OpKind.HF_DENSE),
            norm, op(OpKind.HF_MLP_UP), op(OpKind.GELU), op(OpKind.HF_MLP_DOWN), op(OpKind.HF_RESIDUAL)]


def hf_recompute_ops(model: ModelSpec, b: int) -> list[Op]:
    """What the backward re-runs of one checkpointed GPTNeoXLayer.

    ``torch.utils.checkpoint`` (non-reentrant, as transformers calls it) stops the
    recompute as soon as the last tensor the backward needs has been saved again: the
    inputs of dense_4h_to_h are saved before its GEMM runs, so the recompute casts that
    weight but runs neither the GEMM nor the residual add (measured: validation/probe_recompute.py).
    """
    d, f = model.hidden, model.ffn
    *head, _down, _residual = hf_encoder_ops(model, b)
    return [*head, Op(OpKind.HF_WEIGHT_CAST, d=d, f=f if f != 4 * d else 0)]


def _build_hf_plan(model: ModelSpec, training: TrainingSpec, par: Parallelism) -> tuple[StagePlan, ...]:
    """framework "hf": the whole model on one GPU per data-parallel replica."""
    if par.pp != 1 or par.mp != 1:
        raise ConfigError("training.framework", "the hf framework models one GPU per replica: "
                          f"needs parallelism.pp = mp = 1, got pp={par.pp}, mp={par.mp}")
    b, d, l, n = training.micro_batch, model.hidden, model.seq_len, model.layers
    f = model.ffn if model.ffn != 4 * d else 0
    v = padded_vocab(model.vocab, 1)
    head = [Op(OpKind.HF_EMBEDDING, b=b, l=l, d=d, v=v)]
    tail = [Op(OpKind.HF_LAYERNORM, b=b, l=l, d=d, h=model.heads), Op(OpKind.HF_LM_HEAD, b=b, l=l, d=d, v=v),
            Op(OpKind.HF_LOSS, b=b, l=l, d=d, v=v)]
    enc = hf_encoder_ops(model, b)
    forward = _merge(_counted(head, 1), _counted(enc, n), _counted(tail, 1))
    full = training.recompute is Recompute.FULL
    recompute = _merge(_counted(hf_recompute_ops(model, b), n)) if full else ()
    role = stage_role(0, 1)
    update = dict(d=d, v=v, f=f, layers=n)
    return (StagePlan(
        index=0, role=role, encoders=n, forward=forward, backward=forward, recompute=recompute,
        mp_allreduces_fwd=0, mp_allreduces_bwd=0, mp_allreduce_entries=b * l * d, p2p_entries=0,
        params=hf_params(Op(OpKind.HF_OPTIMIZER, **update)),
        optimizer=Op(OpKind.HF_OPTIMIZER, **update),
        grad_accum=Op(OpKind.HF_GRAD_ACCUM, **update),
        grad_accum_count=training.micro_batches - 1,
    ),)


def build_stage_plans(model: ModelSpec, training: TrainingSpec, par: Parallelism) -> tuple[StagePlan, ...]:
    """Every pipeline stage's plan. Validates that the model fits the layout."""
    check_model_fits(model, par)
    if training.framework is Framework.HF:
        return _build_hf_plan(model, training, par)
    b, mp = training.micro_batch, par.mp
    d, l = model.hidden, model.seq_len
    v = padded_vocab(model.vocab, mp)
    enc = encoder_ops(model, b, mp)
    counts = partition_encoders(model.layers, par.pp)
    full = training.recompute is Recompute.FULL
    plans = []
    for s, n in enumerate(counts):
        role = stage_role(s, par.pp)
        head: list[Op] = []
        tail: list[Op] = []
        if role.has_embedding:
            head.append(Op(OpKind.EMBEDDING, b=b, l=l, d=d, mp=mp, v=v))
        if role.has_head:
            tail += [enc[0],  # the final norm has the encoders' norm shape
                     Op(OpKind.LINEAR_FINAL, b=b, l=l, d=d, mp=mp, v=v),
                     Op(OpKind.CROSS_ENTROPY, b=b, l=l, d=d, mp=mp, v=v)]
        forward = _merge(_counted(head, 1), _counted(enc, n), _counted(tail, 1))
        recompute = _merge(_counted(enc, n)) if full else ()
        fwd_syncs = model.fwd_mp_syncs * n + (1 if role.has_embedding else 0)
        bwd_syncs = model.bwd_mp_syncs * n + (model.fwd_mp_syncs * n if full else 0)
        plans.append(StagePlan(
            index=s, role=role, encoders=n,
            forward=forward, backward=forward, recompute=recompute,
            mp_allreduces_fwd=fwd_syncs, mp_allreduces_bwd=bwd_syncs,
            mp_allreduce_entries=b * l * d,
            p2p_entries=(b * l * d) // mp if par.pp > 1 else 0,
            params=stage_params(model, mp, role, n),
            optimizer=Op(_OPTIMIZER_KIND[role], d=d, mp=mp, layers=n),
        ))
    return tuple(plans)
