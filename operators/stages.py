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

from trainsim.operators.ops import Direction, Op, OpKind, bytes_moved, flops
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


@dataclass(frozen=True, slots=True)
class GradSegment:
    """Parameter tensors (their sizes, in the order the framework buckets them) whose gradients are
    complete once ``ops`` (backward kernels) and ``recompute`` (forward kernels re-run in the
    backward) have run; a stage's segments are listed in the order its backward runs them."""

    tensors: tuple[int, ...]
    ops: tuple[OpCount, ...]
    recompute: tuple[OpCount, ...] = ()
    layer: bool = False  # one transformer layer (FSDP shards per layer); else embedding or head

    @property
    def params(self) -> int:
        return sum(self.tensors)


@dataclass(frozen=True, slots=True)
class DPBuckets:
    """How a framework packs gradients into DP all-reduce buckets (sizes in 2-byte entries)."""

    first_entries: int  # cap of the first bucket (PyTorch DDP: 1 MiB)
    entries: int  # cap of the others (DDP: bucket_cap_mb = 25)
    entries_per_param: int  # 2: fp32 gradients


@dataclass(frozen=True, slots=True)
class FSDPUnits:
    """A stage's FSDP2 units: one per layer (``layers`` of ``layer_shard`` entries per rank) and the
    root (embedding, final norm and LM head: ``root_shard`` entries per rank), over ``ranks`` GPUs."""

    layers: int
    layer_shard: int
    root_shard: int
    ranks: int


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
    # MP collectives of unequal sizes (framework "hf": DTensor moves bf16 activations forward and
    # fp32 gradients backward): (entries, count) per micro-batch. Empty: ``mp_allreduces_fwd`` /
    # ``_bwd`` all-reduces of ``mp_allreduce_entries`` each (Megatron).
    mp_colls_fwd: tuple[tuple[int, int], ...] = ()
    mp_colls_bwd: tuple[tuple[int, int], ...] = ()
    # Gradients in the order the last backward produces them, for frameworks whose DP buckets are
    # ready as it runs (PyTorch DDP): empty means equal buckets ready at equal fractions.
    grad_segments: tuple[GradSegment, ...] = ()
    dp_buckets: DPBuckets | None = None
    # FSDP2 (framework "hf", zero_stage 3): per micro-batch, every FSDP unit's parameters are
    # all-gathered before its forward and again before its backward, and its gradients
    # reduce-scattered after it; (units, layer shard entries, root shard entries) in 2-byte entries
    # per rank. None: not sharded.
    fsdp: FSDPUnits | None = None
    # The PyTorch runtime whose host (CPU) cost the profile may know (calibration.host_overhead):
    # "eager", "dtensor_tp", ...; None: not modelled (Megatron's kernels are priced alone).
    runtime: str | None = None

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


def counted(ops: list[Op], times: int) -> list[OpCount]:
    """Merge repeated operators (e.g. the two norms of an encoder) and scale by ``times``."""
    counts: dict[Op, int] = {}
    for o in ops:
        counts[o] = counts.get(o, 0) + times
    return [OpCount(o, c) for o, c in counts.items() if c]


def merge(*groups: list[OpCount]) -> tuple[OpCount, ...]:
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


def build_stage_plans(model: ModelSpec, training: TrainingSpec, par: Parallelism) -> tuple[StagePlan, ...]:
    """Every pipeline stage's plan. Validates that the model fits the layout."""
    check_model_fits(model, par)
    if training.framework is Framework.HF:
        from trainsim.operators.hf_stages import build_hf_plans

        return build_hf_plans(model, training, par)
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
        forward = merge(counted(head, 1), counted(enc, n), counted(tail, 1))
        recompute = merge(counted(enc, n)) if full else ()
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
