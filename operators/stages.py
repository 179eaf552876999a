"""Per-stage forward/backward operator lists: the work of one micro-batch on one MP rank.

This is the decomposition the paper's predictor sums (Sec. III): each stage runs
its encoders' operators, the first stage also the embedding (and its MP
all-reduce), the last the final norm, LM head and vocab-parallel cross-entropy.
A full recompute re-runs every encoder's forward (and its MP all-reduces) inside
the backward. The PP send is described here by its size; which links it crosses
is the topology's business.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from trainsim.operators.ops import FP8_OF, Direction, Op, OpKind, bytes_moved, flops, fused_op
from trainsim.operators.partition import (
    StageRole,
    kv_heads_per_rank,
    padded_vocab,
    split_encoders,
    stage_layer_params,
    stage_params,
    stage_role,
)
from trainsim.operators.spec import (
    Attention,
    Framework,
    GradAccumulation,
    Mlp,
    ModelSpec,
    Norm,
    Parallelism,
    Precision,
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


#: Megatron kinds that every MP rank computes whole unless sequence parallelism splits them
_REPLICATED_UNDER_TP = frozenset({OpKind.LAYERNORM, OpKind.RMSNORM, OpKind.RES_ADD})


@dataclass(frozen=True, slots=True)
class CPRing:
    """Context parallelism of a stage: per layer and micro-batch, ``ranks - 1`` ring steps in which
    each rank sends its current K/V chunk (``kv_entries`` 2-byte entries: keys and values of its
    b * l / cp tokens and kv heads per MP rank) to the next while computing ``attention`` (one of the
    ring's flash-attention calls) on the chunk it holds. The backward sends K/V and their gradients
    (twice the entries) around the ring while the attention's backward runs."""

    ranks: int
    kv_entries: int
    attention: Op
    layers: int


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
    # framework "hf": fp32 gradient accumulation, run ``grad_accum_count`` (= m - 1, plus the
    # runtime's own passes over the gradients, in accumulation passes' worth) times per update (the
    # first micro-batch's gradients are assigned, not added). Direction "update".
    grad_accum: Op | None = None
    grad_accum_count: float = 0
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
    # "eager", "ddp", "dtensor_tp", "megatron_eager", ...; None: not modelled (Megatron-Core's fused
    # kernels are priced by their GPU work alone: their host cost was not measured).
    runtime: str | None = None
    # Megatron sequence parallelism: each of the MP syncs is a reduce-scatter plus an all-gather of
    # ``mp_allreduce_entries`` (each rank keeps or brings 1/mp of them) instead of an all-reduce
    sequence_parallel: bool = False
    cp_ring: CPRing | None = None  # context parallelism (parallelism.cp > 1)
    # parallelism.tp_comm_overlap: the encoder's four GEMMs (QKV, attention output, MLP up, MLP
    # down) whose time hides the SP all-gather before a column-parallel one and the reduce-scatter
    # after a row-parallel one; None: the MP syncs are exposed whole
    tp_overlap_gemms: tuple[Op, Op, Op, Op] | None = None
    # framework "hf": one micro-batch's operators in the order the host issues them (the stage's
    # head, one layer, its recompute, the tail; the layer repeated ``encoders`` times), for the
    # host-GPU flow shop of sim.costs; empty: not known
    issue_head: tuple[Op, ...] = ()
    issue_layer: tuple[Op, ...] = ()
    issue_recompute: tuple[Op, ...] = ()
    issue_tail: tuple[Op, ...] = ()
    # framework "hf" with mp > 1: the MP all-reduces where the GPU runs them in that order, for the
    # same flow shop: (pass "fwd" | "bwd" | "rec", the operator kind they follow in it, entries,
    # how many). Forward: after the row-parallel outputs, the embedding and the loss; backward: after
    # the column-parallel inputs' gradients; "rec": after a recomputed row-parallel output.
    issue_mp: tuple[tuple[str, OpKind, int, int], ...] = ()

    def distinct_ops(self) -> set[Op]:
        ops = {oc.op for oc in (*self.forward, *self.backward, *self.recompute)}
        if self.cp_ring is not None:
            ops.add(self.cp_ring.attention)
        return ops

    def flops(self) -> tuple[float, float]:
        """Model FLOPs of one micro-batch (forward, backward) on one rank, recompute excluded.

        Work every MP rank repeats (norms and residual adds on the whole sequence, without sequence
        parallelism) counts 1/mp per rank: model FLOPs count the model's work once, so they do not
        change with how it is laid out."""
        def share(oc: OpCount, direction: Direction) -> float:
            f = oc.count * flops(oc.op, direction)
            replicated = oc.op.kind in _REPLICATED_UNDER_TP and not self.sequence_parallel
            return f / oc.op.mp if replicated else f

        fwd = sum(share(oc, Direction.FWD) for oc in self.forward)
        bwd = sum(share(oc, Direction.BWD) for oc in self.backward)
        return fwd, bwd

    def bytes_moved(self, elem_bytes: int = 2) -> float:
        fwd = sum(oc.count * bytes_moved(oc.op, Direction.FWD, elem_bytes) for oc in self.forward)
        bwd = sum(oc.count * bytes_moved(oc.op, Direction.BWD, elem_bytes) for oc in self.backward)
        return fwd + bwd


def encoder_ops(model: ModelSpec, b: int, mp: int, *, sp: bool = False, cp: int = 1,
                fp8: bool = False) -> list[Op]:
    """One encoder's operators in execution order (the reference's encoder function list).

    ``sp``: Megatron sequence parallelism, the norms and residual adds on 1/mp of the sequence.
    ``cp``: context parallelism, every operator on 1/cp of the sequence and the attention as ``cp``
    flash-attention calls of that chunk (the K/V ring's steps; causal load balancing makes them
    equal, and together they do 1/cp of the attention's work). ``fp8``: the four GEMMs in FP8, each
    after the cast of its input (:func:`fp8_cast_ops`).
    """
    d, h, f = model.hidden, model.heads, model.ffn
    l = model.seq_len // cp  # noqa: E741
    swiglu = model.mlp is Mlp.SWIGLU
    kv = model.kv if model.kv != h else 0

    def op(kind: OpKind, length: int = l, width: int = f) -> Op:
        qkv = kind is OpKind.LINEAR1
        if fp8 and kind in FP8_OF:
            kind = FP8_OF[kind]
        return Op(kind, b=b, l=length, d=d, h=h, mp=mp, f=width if width != 4 * d else 0, kv=kv if qkv else 0)

    short = l // mp if sp and mp > 1 else l
    norm = op(OpKind.LAYERNORM if model.norm is Norm.LAYERNORM else OpKind.RMSNORM, short)
    res_add = op(OpKind.RES_ADD, short)
    ops = [norm, op(OpKind.LINEAR1)]
    if model.rotary:
        ops.append(op(OpKind.ROPE))
    ops += attention_core_ops(model, b, mp, cp)
    up = op(OpKind.LINEAR3, width=2 * f) if swiglu else op(OpKind.LINEAR3)
    ops += [op(OpKind.LINEAR2), norm, res_add, up, op(OpKind.SWIGLU if swiglu else OpKind.GELU),
            op(OpKind.LINEAR4), res_add]
    return ops


def attention_core_ops(model: ModelSpec, b: int, mp: int, cp: int = 1) -> list[Op]:
    """The attention core (scores, softmax, weighted values): what selective recompute re-runs."""
    d, h = model.hidden, model.heads
    l = model.seq_len // cp  # noqa: E741

    def op(kind: OpKind) -> Op:
        return Op(kind, b=b, l=l, d=d, h=h, mp=mp)

    if model.attention is Attention.FLASH:
        return [op(OpKind.FLASH_ATTN)] * cp
    drop = [op(OpKind.ATTN_DROPOUT)] if model.attention_dropout else []
    if model.attention is Attention.FUSED_SOFTMAX:
        return [op(OpKind.BADDBMM), op(OpKind.FUSED_SOFTMAX), *drop, op(OpKind.BMM)]
    return [op(OpKind.BADDBMM), op(OpKind.FILLMASK), op(OpKind.SOFTMAX), *drop, op(OpKind.BMM)]


def fp8_cast_ops(model: ModelSpec, b: int, mp: int, cp: int, direction: Direction) -> list[Op]:
    """Transformer Engine's scaled casts to FP8 of one encoder: forward, the input of each GEMM
    (QKV and MLP-up read the whole hidden state, attention output d/mp, MLP-down f/mp); backward,
    each GEMM's output gradient. A cast's width is per rank (the ``d`` of an ``fp8_cast`` op). The
    weights' casts, once per iteration with Megatron's ``is_first_microbatch``, are not modelled."""
    l, d, f = model.seq_len // cp, model.hidden, model.ffn
    up = (2 if model.mlp is Mlp.SWIGLU else 1) * f // mp
    qkv = Op(OpKind.LINEAR1, d=d, h=model.heads, mp=mp, kv=model.kv if model.kv != model.heads else 0).qkv // mp
    widths = (d, d // mp, d, f // mp) if direction is Direction.FWD else (qkv, d, up, d)
    return [Op(OpKind.FP8_CAST, b=b, l=l, d=w) for w in widths]


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
    b, mp, cp = training.micro_batch, par.mp, par.cp
    d, l = model.hidden, model.seq_len // cp
    sp = par.sequence_parallel and mp > 1
    fp8 = training.precision is Precision.FP8
    v = padded_vocab(model.vocab, mp)
    enc = encoder_ops(model, b, mp, sp=sp, cp=cp, fp8=fp8)
    enc_bwd = enc
    if fp8:  # the backward casts output gradients, not inputs
        enc_bwd = [o for o in enc if o.kind is not OpKind.FP8_CAST] + fp8_cast_ops(model, b, mp, cp, Direction.BWD)
        enc = enc + fp8_cast_ops(model, b, mp, cp, Direction.FWD)
    if training.fused_kernels:  # Megatron-Core / Transformer Engine: one fused kernel each
        enc = [fused_op(o) for o in enc]
        enc_bwd = [fused_op(o) for o in enc_bwd]
    counts = split_encoders(model.layers, par)
    full = training.recompute is Recompute.FULL
    selective = training.recompute is Recompute.SELECTIVE
    core = attention_core_ops(model, b, mp, cp)
    grad_ranks = par.grad_ranks
    fsdp = training.fsdp_sharded and grad_ranks > 1
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
        backward = merge(counted(head, 1), counted(enc_bwd, n), counted(tail, 1)) if fp8 else forward
        recompute = merge(counted(enc, n)) if full else merge(counted(core, n)) if selective else ()
        fwd_syncs = model.fwd_mp_syncs * n + (1 if role.has_embedding else 0)
        bwd_syncs = model.bwd_mp_syncs * n + (model.fwd_mp_syncs * n if full else 0)
        params = stage_params(model, mp, role, n)
        units = None
        segments: tuple[GradSegment, ...] = ()
        if fsdp:
            root = params - n * stage_layer_params(model, mp)
            units = FSDPUnits(layers=n, layer_shard=-(-(params - root) // max(n, 1) // grad_ranks),
                              root_shard=-(-root // grad_ranks), ranks=grad_ranks)
            layer_seg = GradSegment((), tuple(counted(enc_bwd, 1)), tuple(counted(enc, 1)) if full else (), True)
            segments = ((GradSegment((), tuple(counted(tail, 1))),) if role.has_head else ()) + (layer_seg,) * n + (
                (GradSegment((), tuple(counted(head, 1))),) if role.has_embedding else ())
        grad_accum, accum_count = _autograd_accumulation(model, training, n, mp, params)
        plans.append(StagePlan(
            index=s, role=role, encoders=n,
            forward=forward, backward=backward, recompute=recompute,
            grad_accum=grad_accum, grad_accum_count=accum_count,
            mp_allreduces_fwd=fwd_syncs, mp_allreduces_bwd=bwd_syncs,
            mp_allreduce_entries=b * l * d,
            p2p_entries=(b * l * d) // mp if par.pp > 1 else 0,
            params=params,
            optimizer=Op(_OPTIMIZER_KIND[role], d=d, mp=mp, layers=n),
            grad_segments=segments, fsdp=units,
            sequence_parallel=sp,
            tp_overlap_gemms=_encoder_gemms(enc) if sp and par.tp_comm_overlap else None,
            cp_ring=CPRing(ranks=cp, kv_entries=2 * b * l * kv_heads_per_rank(model, mp) * model.head_dim,
                           attention=core[0], layers=n) if cp > 1 else None,
            runtime=None if training.fused_kernels or cp > 1 else megatron_runtime(mp, par.pp),
        ))
    return tuple(plans)


def megatron_runtime(mp: int, pp: int) -> str:
    """The host runtime of Megatron's layer in eager PyTorch ops (validation/train_3d.py measured
    it): its tensor-parallel autograd functions and collectives, and its pipeline's P2P, each add
    host work per layer (calibration/host_overhead.py)."""
    return "megatron_eager" + ("_tp" if mp > 1 else "") + ("_pp" if pp > 1 else "")


#: A runtime that wraps another's model as it is, and that runtime: DDP wraps the eager Hugging Face
#: model, so its micro-batch's head and tail (in layers) and its checkpointed layer's host work are the
#: eager model's, and a host table fitted before DDP had a line of its own prices DDP with the eager
#: line (its own host work, the forward wrapper, the bucket hooks and the all-reduces it launches, is
#: what its line adds; calibration/host_overhead.py)
WRAPPED_RUNTIMES = {"ddp": "eager"}


#: Runtimes whose tensor-parallel ranks meet at collectives inside every layer of a micro-batch
#: (DTensor TP's all-reduces), so where the host sets the pace a micro-batch takes as long as the
#: slowest of their hosts (:func:`slowest_rank_factor`); measured for tp2 and tp4 (calibration/rank_spread.py).
#: Under the pipelining runtime only each stage's TP group meets so: the stages' hosts issue their
#: schedules ahead of the GPUs and never wait for each other (:data:`ISSUE_AHEAD_PIPELINES`), the
#: hand-over between stages is the GPUs'. Not here: DDP's ranks meet once per
#: iteration (``no_sync`` but for the last micro-batch); the eager pipeline, whose hosts wander about
#: half as much as DTensor's (machine BL) and whose rows got worse with the DTensor ranks' lag (pp2 2.6
#: -> 3.1 % on the H200 tables); and FSDP2's shards, at all-gathers issued a unit ahead (prefetch), whose
#: rows got worse with it too (fsdp2xtp2 5.6 -> 8.7 %; docs/multi_gpu.md).
RENDEZVOUS_RUNTIMES = frozenset({"dtensor_tp", "dtensor_tp_pp", "fsdp2_tp"})


#: Pipelined runtimes whose stages' hosts never wait for their GPUs inside an iteration: the
#: pipelining runtime (``torch.distributed.pipelining``: no attention mask, so no host-GPU
#: synchronisation per micro-batch, and its P2P waits are the GPU stream's) and train_3d.py's
#: Megatron layer. Each stage's host issues its whole schedule in order while the GPUs hand the
#: micro-batches on, so where the hosts set the pace an iteration takes the slowest stage's host
#: total, ``m`` micro-batch steps, and the fill and drain are the GPUs' alone (the tiny host rows of
#: every such layout follow ``m`` steps, not ``m + pp - 1``: docs/multi_gpu.md, "A pipeline's host
#: runs ahead"). The simulation gives such a stage a host clock of its own (sim/processes.py).
ISSUE_AHEAD_PIPELINES = frozenset({"eager_pp", "dtensor_tp_pp", "megatron_eager_pp", "megatron_eager_tp_pp"})


def meeting_ranks(runtime: str | None, tp: int) -> int:
    """How many ranks' hosts a host-bound step of ``runtime`` waits for: its TP group (a pipeline's
    stages do not wait for each other's hosts: :data:`ISSUE_AHEAD_PIPELINES`); 1 for a runtime not in
    :data:`RENDEZVOUS_RUNTIMES`."""
    if runtime not in RENDEZVOUS_RUNTIMES:
        return 1
    return tp


@functools.lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals]: 0 for one, 0.5642 for two, 1.0294 for four, 1.4236
    for eight (Simpson's rule on ``z n phi(z) Phi(z)^(n-1)`` over [-9, 9]; exact to 1e-9 for n <= 10^4)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    steps, lo, hi = 3600, -9.0, 9.0
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps + 1):
        z = lo + i * h
        f = z * n * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * (0.5 * math.erfc(-z / math.sqrt(2))) ** (n - 1)
        total += f * (1 if i in (0, steps) else 4 if i % 2 else 2)
    return total * h / 3


def slowest_rank_factor(ranks: int, sigma: float, measured: Mapping[int, float] | None = None) -> float:
    """How much longer the slowest of ``ranks`` hosts takes over a micro-batch than a typical one: the
    ``measured`` lag for that many ranks where there is one (calibration/rank_spread.py), else ``1 +
    sigma * E[max of ranks standard normals]``, host times spread normally with coefficient of variation
    ``sigma`` across ranks (fitted to the measured lags). 1 for one rank."""
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if ranks <= 1:
        return 1.0
    if measured and ranks in measured:
        return float(measured[ranks])
    return 1.0 + sigma * expected_max_normal(ranks)


#: bytes per parameter of autograd accumulation into a 16-bit .grad (read both, write one), and of
#: the master's fp32 gradient (read 16-bit, write 32) plus the copy back (read 32, write 16)
AUTOGRAD_ACCUM_BYTES = 6
AUTOGRAD_MASTER_BYTES = 12


def _autograd_accumulation(model: ModelSpec, training: TrainingSpec, layers: int, mp: int,
                           params: int) -> tuple[Op | None, float]:
    """The memory-bound passes of ``grad_accumulation: autograd`` (see :class:`GradAccumulation`), as
    so many passes of the measured fp32 accumulation kernel (``hf_grad_accum`` over a GPT-NeoX stage
    of this width and depth), scaled by bytes to this stage's parameters: the same HBM-bound kernel
    at the rate it was measured. Priced with the update; (None, 0) for Megatron-Core's fused
    accumulation."""
    if training.grad_accumulation is not GradAccumulation.AUTOGRAD:
        return None, 0.0
    op = Op(OpKind.HF_GRAD_ACCUM, d=model.hidden, v=padded_vocab(model.vocab, 1), f=model.ffn, layers=layers,
            mp=mp)
    per_param = AUTOGRAD_ACCUM_BYTES * (training.micro_batches - 1) + AUTOGRAD_MASTER_BYTES
    return op, per_param * params / bytes_moved(op, Direction.UPDATE)


def _encoder_gemms(enc: list[Op]) -> tuple[Op, Op, Op, Op]:
    """QKV, attention output, MLP up, MLP down of an encoder's operator list (bf16 or FP8 kinds)."""
    by_kind = {o.kind: o for o in enc}
    pick = [by_kind.get(FP8_OF[k], by_kind.get(k)) for k in (OpKind.LINEAR1, OpKind.LINEAR2, OpKind.LINEAR3,
                                                               OpKind.LINEAR4)]
    assert all(o is not None for o in pick)
    return pick[0], pick[1], pick[2], pick[3]  # type: ignore[return-value]

