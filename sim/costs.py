"""Stage costs: operator and collective durations composed per pipeline stage.

Both Eq. 7 (:mod:`sim.eq7`) and the simulation read these numbers, so the two
can be compared term by term. Every distinct operator is predicted once, in a
batch; nothing here runs inside the simulation loop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from trainsim.operators import Collective, CollKind, Direction, DurationModel, Op, OpKind, StagePlan, TrainingSpec
from trainsim.operators.errors import ConfigError, NoSamplesError
from trainsim.operators.ops import FP8_GEMM_KINDS, UNFUSED_OF, eager_op, flops
from trainsim.operators.spec import Parallelism
from trainsim.operators.stages import DPBuckets, GradSegment
from trainsim.sim.exposed import (
    FSDP_OVERLAP_NOTE_SHARE,
    FSDPCopies,
    cp_exposed,
    fsdp_copies,
    fsdp_exposed,
    fsdp_full_pass,
    fsdp_host_overlap,
    tp_overlapped,
)
from trainsim.sim.host_time import host_fields, issues_ahead
from trainsim.topology import ClusterSpec, Placement, closed_form_seconds


@dataclass(frozen=True)
class StageCost:
    """Seconds for one MP rank group of one stage. Per micro-batch unless said otherwise."""

    index: int
    fwd_compute_s: float
    bwd_compute_s: float  # gradient kernels plus the recomputed forward
    recompute_s: float  # the recompute share of bwd_compute_s
    mp_fwd_s: float  # MP all-reduces in the forward
    mp_bwd_s: float  # ... in the backward (recompute's included)
    mp_allreduce_s: float  # one MP all-reduce
    mp_fwd_count: int
    mp_bwd_count: int
    p2p_fwd_s: float  # send activations to the next stage (0 on the last)
    p2p_bwd_s: float  # send gradients to the previous stage (0 on the first)
    dp_bucket_s: tuple[float, ...]  # gradient all-reduce per bucket, per update
    dp_allgather_s: float  # ZeRO-1 parameter all-gather, per update
    optimizer_s: float  # optimizer step, per update
    params: int
    fwd_flops: float
    bwd_flops: float
    # Message sizes, so the simulated network knows the rate a transfer needs when alone.
    mp_allreduce_bytes: float = 0.0  # one MP all-reduce's per-rank buffer
    p2p_bytes: float = 0.0  # one activation (or gradient) message between stages
    dp_bucket_bytes: tuple[float, ...] = ()  # per gradient bucket, per-rank buffer
    dp_allgather_bytes: float = 0.0  # ZeRO-1 per-rank shard
    # Gradient accumulation kernels per update (framework "hf": fp32 adds of m - 1 micro-batches'
    # gradients); Megatron/DeepSpeed accumulate inside the backward GEMMs, so 0 there.
    grad_accum_s: float = 0.0
    # Where in the last backward (fraction of its compute) each DP bucket's gradients are complete,
    # for frameworks whose buckets follow the gradients (PyTorch DDP, which always overlaps); empty:
    # bucket k at (k + 1) / n when ``overlap_dp``, else all at the end.
    dp_bucket_ready: tuple[float, ...] = ()
    # The runtime's host (CPU) time per micro-batch step and what it adds to the step beyond the
    # GPU's compute and MP collectives: all of it where host and GPU work do not overlap ("serial"),
    # else what is left after the GPU's (see calibration.host_overhead). Per update: host_update_s.
    host_fwd_s: float = 0.0
    host_bwd_s: float = 0.0
    host_fwd_extra_s: float = 0.0
    host_bwd_extra_s: float = 0.0
    host_update_s: float = 0.0
    # the stage's host issues its whole schedule ahead of its GPU (a pipeline stage of
    # operators.stages.ISSUE_AHEAD_PIPELINES): the simulation gives it a host clock of its own, and a
    # step's GPU work cannot start before the host starts issuing it nor end before the host is done
    # (host_fwd_s, host_bwd_s per step); the extras above are then Eq. 7's slots only
    host_ahead: bool = False
    # FSDP2: per micro-batch, the all-gathers and reduce-scatters its prefetching does not hide
    # behind the layers' compute (see fsdp_exposed)
    fsdp_fwd_s: float = 0.0
    fsdp_bwd_s: float = 0.0
    # Measured compute-communication interference (the profile's, see _interference): the factor
    # on the backward's compute while a DP all-reduce of this stage runs, and on a DP all-reduce
    # while the stage's backward computes. 1.0: none known.
    interference_compute: float = 1.0
    interference_dp: float = 1.0
    # Per micro-batch (forward + backward): what that interference adds to the closed-form exposed
    # communication above (FSDP2's gathers and reduce-scatters, CP's ring), in Eq. 7's stage times
    # and the simulation's alike; `trainsim compare` reports it beside its attribution.
    interference_in_steps_s: float = 0.0
    # How the gradients are reduced: all-reduce, or reduce-scatter (ZeRO-2, Megatron's distributed
    # optimizer); dp_bucket_bytes is then each bucket's per-rank shard
    dp_reduce_kind: CollKind = CollKind.ALL_REDUCE
    # the parameter all-gather hidden behind the next forward (training.overlap_param_gather);
    # dp_allgather_s is what is left exposed
    dp_allgather_hidden_s: float = 0.0
    # Context parallelism, per micro-batch: the K/V ring's sends the attention does not hide
    # (see cp_exposed), all the ring's send time, and one forward send alone (its rate)
    cp_fwd_s: float = 0.0
    cp_bwd_s: float = 0.0
    cp_ring_s: float = 0.0
    cp_send_s: float = 0.0
    cp_bytes: float = 0.0
    # Per micro-batch (forward + backward, recompute included): the tensor cores' work, each
    # operator's FLOPs at the power probe's GEMM rate (no more than its duration), and the
    # sustained-load factor the power cap put on that work in bf16 (1.0: none; FP8 GEMMs follow
    # their own curve; calibration.power_cap, :func:`build_costs`)
    compute_bound_s: float = 0.0
    power_cap_factor: float = 1.0
    power_cap_s: float = 0.0  # per micro-batch: what the power cap added to the stage's compute

    @property
    def fwd_s(self) -> float:
        """Forward slot as Eq. 7 charges it: compute, MP syncs, exposed CP and FSDP communication, the
        host's excess and the P2P send."""
        return (self.fwd_compute_s + self.mp_fwd_s + self.cp_fwd_s + self.fsdp_fwd_s + self.host_fwd_extra_s
                + self.p2p_fwd_s)

    @property
    def bwd_s(self) -> float:
        return (self.bwd_compute_s + self.mp_bwd_s + self.cp_bwd_s + self.fsdp_bwd_s + self.host_bwd_extra_s
                + self.p2p_bwd_s)

    @property
    def dp_allreduce_s(self) -> float:
        return float(sum(self.dp_bucket_s))

    @property
    def update_s(self) -> float:
        return self.optimizer_s + self.grad_accum_s + self.host_update_s + self.dp_allgather_s


@dataclass(frozen=True)
class IterationCosts:
    stages: tuple[StageCost, ...]
    micro_batches: int
    parallelism: Parallelism
    mp_span: tuple[int, int]  # (nodes, GPUs per node) of an MP group
    dp_span: tuple[int, int]  # ... of a gradient group (DP x CP ranks)
    p2p_spans: tuple[tuple[int, int], ...]  # per stage boundary s -> s+1
    notes: tuple[str, ...] = field(default=())  # fallbacks taken (closed-form collectives, ...)

    @property
    def pp(self) -> int:
        return len(self.stages)


def _buckets(entries: int, bucket: int) -> list[int]:
    """Split a message into bucket-sized pieces, as the framework's gradient buckets do."""
    n_full, rest = divmod(entries, bucket)
    return [bucket] * n_full + ([rest] if rest else [])


def _ddp_buckets(segments: Sequence[GradSegment], caps: DPBuckets) -> list[tuple[int, int]]:
    """(entries, index of the segment that completes it) per bucket, by PyTorch DDP's rule: tensors
    in order, a bucket closes once it reaches its cap (the first bucket's cap is smaller); a tensor
    is never split."""
    out: list[tuple[int, int]] = []
    size = 0
    for i, seg in enumerate(segments):
        for t in seg.tensors:
            size += t * caps.entries_per_param
            if size >= (caps.first_entries if not out else caps.entries):
                out.append((size, i))
                size = 0
    if size:
        out.append((size, len(segments) - 1))
    return out


def _segment_ends(segments: Sequence[GradSegment], fwd: dict[Op, float], bwd: dict[Op, float]) -> list[float]:
    """Fraction of a backward's compute (recompute included) done when each segment's gradients are."""
    t, ends = 0.0, []
    for seg in segments:
        t += sum(oc.count * bwd[oc.op] for oc in seg.ops) + sum(oc.count * fwd[oc.op] for oc in seg.recompute)
        ends.append(t)
    return [e / t if t > 0 else 1.0 for e in ends]






_GEMM_KINDS = frozenset({OpKind.LINEAR1, OpKind.LINEAR2, OpKind.LINEAR3, OpKind.LINEAR4, OpKind.LINEAR_FINAL,
                         OpKind.FP8_LINEAR1, OpKind.FP8_LINEAR2, OpKind.FP8_LINEAR3, OpKind.FP8_LINEAR4,
                         OpKind.HF_QKV, OpKind.HF_DENSE, OpKind.HF_MLP_UP, OpKind.HF_MLP_DOWN, OpKind.HF_LM_HEAD})
_ATTENTION_KINDS = frozenset({OpKind.FLASH_ATTN, OpKind.BADDBMM, OpKind.BMM, OpKind.HF_ATTENTION})


def _interference(model: DurationModel, plan: StagePlan, bwd: dict[Op, float],
                  bucket_bytes: Sequence[float]) -> dict[str, float]:
    """The stage's interference factors from the profile's measured model, if it has one.

    The compute factor is the backward's: each operator class (GEMM, attention, the rest
    memory-bound) at its measured slowdown under a collective of the stage's mean bucket size,
    weighted by the class's share of the backward's time. The DP factor is the all-reduce's
    slowdown beside compute at that size. Both apply only where the simulation overlaps the two
    (DP buckets during the last backward).
    """
    im = getattr(model, "interference", None)
    if im is None or not bucket_bytes:
        return {}
    size = sum(bucket_bytes) / len(bucket_bytes)
    compute = _compute_factor(im, plan.backward, bwd, size)
    if compute is None:
        return {}
    return {"interference_compute": compute, "interference_dp": im.collective_factor(None, size)}


def _interference_size_note(model: DurationModel, sizes: Sequence[float], notes: list[str]) -> None:
    """A note when a collective that overlaps compute (``sizes``: a DDP stage's mean bucket, an FSDP2
    gather, a CP send) is outside the message sizes the profile's interference was measured at (its
    factors are then the nearest measured size's)."""
    measured = getattr(getattr(model, "interference", None), "measured_sizes", lambda: None)()
    outside = [b for b in sizes if measured is not None and not measured[0] <= b <= measured[1]]
    if outside:
        assert measured is not None
        lo, hi = measured
        small, large = _mib(min(outside)), _mib(max(outside))
        beside = f"a collective of {small} MiB" if small == large else f"collectives of {small}-{large} MiB"
        notes.append(f"profile {getattr(model, 'name', '?')!r}: compute-communication interference beside "
                     f"{beside} is priced at the nearest measured size's factors (interference.json measured "
                     f"{_mib(lo)}-{_mib(hi)} MiB)")


def _mib(nbytes: float) -> str:
    """Bytes as MiB for a note: three significant digits, whole MiB with separators from 1,000."""
    m = nbytes / 2.0**20
    return f"{m:,.0f}" if m >= 1000 else f"{m:.3g}"


class _ComputeSlowdown(Protocol):
    """What _compute_factor needs of a profile's interference model (calibration.interference)."""

    def compute_factor(self, kind: str, coll_bytes: float | None = None) -> float: ...


def _compute_factor(im: _ComputeSlowdown, ops: Sequence, table: dict[Op, float], size: float) -> float | None:
    """Compute's slowdown beside a collective of ``size`` bytes: each operator class (GEMM,
    attention, the rest memory-bound) at its measured factor, weighted by its share of the time of
    ``ops`` (None: no time)."""
    shares = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
    for oc in ops:
        cls = "gemm" if oc.op.kind in _GEMM_KINDS else "attention" if oc.op.kind in _ATTENTION_KINDS else "memory"
        shares[cls] += oc.count * table[oc.op]
    total = sum(shares.values())
    if not total > 0:
        return None
    return float(sum(t * im.compute_factor(cls, size) for cls, t in shares.items()) / total)


class _PowerCap(Protocol):
    """What build_costs needs of a profile's power-cap model (calibration.power_cap.PowerCapModel)."""

    gpu: str

    def factor(self, precision: str, share: float, w: float = 0.0) -> float: ...

    def tensor_core_seconds(self, precision: str, work: float) -> float: ...

    def filler_weight(self, kind: str, direction: str) -> float: ...

    def sample_cap(self, precision: str, duration_s: float, tensor_core_s: float, w: float) -> float: ...


#: (operator, direction) -> (its FLOPs at the power probe's GEMM rate, s; the GEMM precision whose power
#: curve it follows)
TensorCoreSeconds = dict[tuple[Op, Direction], tuple[float, str]]


def _tensor_core_seconds(cap: _PowerCap | None, ops: Sequence[Op]) -> TensorCoreSeconds:
    """Each operator's tensor-core work as seconds of the power probe's GEMM (calibration.power_cap);
    empty without a power cap."""
    if cap is None:
        return {}
    out: TensorCoreSeconds = {}
    for op in ops:
        precision = "fp8" if op.kind in FP8_GEMM_KINDS else "bf16"
        for d in (Direction.FWD, Direction.BWD):
            out[op, d] = (cap.tensor_core_seconds(precision, flops(op, d)), precision)
    return out


def _compute_bound_s(p: StagePlan, fwd: dict[Op, float], bwd: dict[Op, float], tc: TensorCoreSeconds) -> float:
    """A micro-batch's tensor-core seconds on this stage (forward, backward and recompute), each
    operator's no more than its duration."""
    if not tc:
        return 0.0
    f = sum(oc.count * min(fwd[oc.op], tc[oc.op, Direction.FWD][0]) for oc in (*p.forward, *p.recompute))
    return f + sum(oc.count * min(bwd[oc.op], tc[oc.op, Direction.BWD][0]) for oc in p.backward)


def power_cap_shares(costs: IterationCosts, iteration_s: float) -> list[float]:
    """Per stage, the share of the iteration its GPUs spend in tensor-core work (every micro-batch's
    ``compute_bound_s`` over the iteration): the D of calibration.power_cap's measured curve. The time
    the compute is stretched by a collective beside it (``interference_in_steps_s``: FSDP2's gathers
    and reduce-scatters, CP's K/V sends) counts as tensor-core work too: the GEMM is still running
    then, with the collective drawing power beside it, so that stretch is no lighter than the GEMM
    alone (machine AW's FSDP2 timelines: the GEMMs that run alone are as throttled as one GPU's,
    ×1.003, docs/efficiency.md). DDP's overlapped buckets stretch the compute only in the simulation,
    not in the closed form this share is taken over, so they do not dilute it either. The rest of the
    iteration counts as the probe's other work, copies, whose power an idle GPU (the bubbles, the
    host's gaps) does not draw: where a GPU idles much, the throttle is over-stated."""
    if not (iteration_s > 0):
        return [0.0] * len(costs.stages)
    return [min(1.0, costs.micro_batches * (s.compute_bound_s + s.interference_in_steps_s) / iteration_s)
            for s in costs.stages]


def _compute_s(p: StagePlan, fwd: dict[Op, float], bwd: dict[Op, float]) -> float:
    """A micro-batch's compute on the stage: forward, recompute and backward."""
    return (sum(oc.count * fwd[oc.op] for oc in (*p.forward, *p.recompute))
            + sum(oc.count * bwd[oc.op] for oc in p.backward))


#: (operator kind, direction) -> its filler class (calibration.power_cap: 0 as a copy, 1 as a GELU)
FillerWeights = dict[tuple[OpKind, Direction], float]


def _filler_weights(cap: _PowerCap, fwd: dict[Op, float], bwd: dict[Op, float],
                    upd: dict[Op, float]) -> FillerWeights:
    """Every operator kind's filler class in each direction it runs, looked up once per run."""
    out: FillerWeights = {}
    for table, direction in ((fwd, Direction.FWD), (bwd, Direction.BWD), (upd, Direction.UPDATE)):
        for kind in {op.kind for op in table}:
            out[kind, direction] = cap.filler_weight(kind.value, direction.value)
    return out


def _burst_tables(fwd: dict[Op, float], bwd: dict[Op, float], tc: TensorCoreSeconds, cap: _PowerCap,
                  weights: FillerWeights) -> tuple[dict[Op, float], dict[Op, float]]:
    """The operator tables as bursts: each sample over what the cap had already taken of it while the
    harness timed it (``cap.sample_cap``: a tensor-core kernel of more than a few milliseconds)."""
    def burst(table: dict[Op, float], direction: Direction) -> dict[Op, float]:
        out = {}
        for op, t in table.items():
            sec, precision = tc.get((op, direction), (0.0, "bf16"))
            out[op] = t / cap.sample_cap(precision, t, sec, weights[op.kind, direction]) if sec else t
        return out
    return burst(fwd, Direction.FWD), burst(bwd, Direction.BWD)


def filler_share(p: StagePlan, micro_batches: int, fwd: dict[Op, float], bwd: dict[Op, float],
                 upd: dict[Op, float], tc: TensorCoreSeconds, weights: FillerWeights) -> float:
    """The filler class w of a stage's time off the tensor cores over an iteration (calibration.power_cap:
    0 as the probe's copies, 1 as its GELUs): every operator's time beside its tensor-core seconds, the
    update's kernels included, weighted by its kind's measured class. The idle time of bubbles and host
    gaps is not in it (it draws no power; the curves' D counts it as filler, as before)."""
    num = den = 0.0
    for ocs, table, direction in ((p.forward, fwd, Direction.FWD), (p.recompute, fwd, Direction.FWD),
                                  (p.backward, bwd, Direction.BWD)):
        for oc in ocs:
            t = table[oc.op]
            rest = micro_batches * oc.count * (t - min(t, tc.get((oc.op, direction), (0.0, ""))[0]))
            num += rest * weights[oc.op.kind, direction]
            den += rest
    for op, count in ((p.optimizer, 1), (p.grad_accum, p.grad_accum_count)):
        if op is not None and count:
            num += count * upd[op] * weights[op.kind, Direction.UPDATE]
            den += count * upd[op]
    return num / den if den > 0 else 0.0


def _sustained(fwd: dict[Op, float], bwd: dict[Op, float], tc: TensorCoreSeconds, cap: _PowerCap,
               d: float, w: float = 0.0) -> tuple[dict[Op, float], dict[Op, float]]:
    """The operator tables of a GPU that sustains tensor-core share ``d`` beside other work of filler
    class ``w`` (:func:`filler_share`): each operator longer by its precision's measured factor, less
    one, times its tensor-core seconds."""
    extra = {k: cap.factor(k, d, w) - 1.0 for k in {k for _, k in tc.values()}}  # per precision, once

    def stretch(table: dict[Op, float], direction: Direction) -> dict[Op, float]:
        out = {}
        for op, t in table.items():
            sec, precision = tc.get((op, direction), (0.0, "bf16"))
            out[op] = t + extra.get(precision, 0.0) * min(t, sec)
        return out
    return stretch(fwd, Direction.FWD), stretch(bwd, Direction.BWD)


def _op_table(model: DurationModel, ops: Sequence[Op], direction: Direction,
              notes: list[str] | None = None) -> dict[Op, float]:
    if not ops:
        return {}
    swiglu = [o for o in ops if o.kind is OpKind.SWIGLU]
    fused = [o for o in ops if o.kind in UNFUSED_OF]
    rest = [o for o in ops if o.kind is not OpKind.SWIGLU and o.kind not in UNFUSED_OF]
    out: dict[Op, float] = {}
    if rest:
        secs = np.asarray(model.op_seconds(rest, direction), dtype=float)
        out.update(zip(rest, secs.tolist(), strict=True))
    if swiglu:
        out.update(_swiglu_table(model, swiglu, direction, notes))
    for kind in dict.fromkeys(o.kind for o in fused):
        out.update(_fused_table(model, [o for o in fused if o.kind is kind], direction, notes))
    return out


def _fused_table(model: DurationModel, ops: Sequence[Op], direction: Direction,
                 notes: list[str] | None) -> dict[Op, float]:
    """A fused kind's durations (``training.kernels: fused``): the faster of its regressor and the
    eager kind's (a fused kernel is never slower than the eager sequence it replaces: measured 1.8-11x
    faster at the published shapes, docs/published.md; a regressor's error at a small shape may say
    otherwise), or the eager kind alone, with a note, where the profile has no samples of the fused
    kind."""
    kind = ops[0].kind
    eager = [eager_op(o) for o in ops]
    slow = _op_table(model, eager, direction, notes)
    try:
        secs = np.asarray(model.op_seconds(list(ops), direction), dtype=float)
    except NoSamplesError as e:
        if e.kind != kind.value:
            raise
        if notes is not None:
            notes.append(f"profile {getattr(model, 'name', '?')!r} has no {kind.value} samples; the fused kernel "
                         f"is priced as the eager {UNFUSED_OF[kind].value}")
        return {o: slow[e] for o, e in zip(ops, eager, strict=True)}
    return {o: min(t, slow[e]) for o, e, t in zip(ops, eager, secs.tolist(), strict=True)}


def _swiglu_table(model: DurationModel, ops: Sequence[Op], direction: Direction,
                  notes: list[str] | None) -> dict[Op, float]:
    """SwiGLU's durations: from the profile's swiglu samples, else as the GeLU operator moving the
    same bytes (a memory-bound elementwise kernel: SwiGLU reads 2f and writes f per token, GeLU
    reads and writes f, so GeLU at width 1.5f), with a note."""
    try:
        secs = np.asarray(model.op_seconds(list(ops), direction), dtype=float)
        return dict(zip(ops, secs.tolist(), strict=True))
    except NoSamplesError as e:
        if e.kind != OpKind.SWIGLU.value:
            raise
    stand_in = [dataclasses.replace(o, kind=OpKind.GELU, f=3 * o.ffn // 2) for o in ops]
    secs = np.asarray(model.op_seconds(stand_in, direction), dtype=float)
    if notes is not None:
        notes.append(f"profile {getattr(model, 'name', '?')!r} has no swiglu samples; SwiGLU is priced as the "
                     "GeLU operator over the same bytes (width 1.5 f)")
    return dict(zip(ops, secs.tolist(), strict=True))


def build_costs(
    plans: Sequence[StagePlan],
    training: TrainingSpec,
    par: Parallelism,
    cluster: ClusterSpec,
    model: DurationModel,
    power_cap: bool = True,
) -> IterationCosts:
    """Predict every operator and collective once and compose the per-stage costs.

    Where the profile has a measured power cap (``model.power_cap``, calibration.power_cap) and
    ``power_cap`` is on, the stages are composed again with their tensor-core kernels slowed as a
    GPU sustaining that stage's mix is (:func:`power_cap_shares`)."""
    placement = Placement(par, cluster.gpus_per_node)
    notes: list[str] = []

    ops = sorted({o for p in plans for o in p.distinct_ops()}, key=repr)
    fwd = _op_table(model, ops, Direction.FWD, notes)
    bwd = _op_table(model, ops, Direction.BWD, notes)
    fsdp_pass = {p.index: fsdp_full_pass(p) for p in plans if p.fsdp is not None and p.grad_accum is not None}
    upd = _op_table(model, [p.optimizer for p in plans] + [p.grad_accum for p in plans if p.grad_accum]
                    + list(fsdp_pass.values()), Direction.UPDATE)

    mp_span = placement.mp_span()
    dp_span = placement.dp_span()
    p2p_spans = tuple(placement.p2p_span(s) for s in range(par.pp - 1))
    grad_ranks = par.grad_ranks

    # Every distinct collective, predicted in one batch; unknown ones fall back to closed form.
    wanted: dict[Collective, float] = {}

    def coll(kind: CollKind, entries: int, span: tuple[int, int]) -> Collective:
        c = Collective(kind, int(entries), span[0], span[1])
        wanted.setdefault(c, math.nan)
        return c

    mp_ar = mp_ag = None
    if par.mp > 1 and plans[0].sequence_parallel:  # one sync = reduce-scatter + all-gather of 1/mp shards
        shard = plans[0].mp_allreduce_entries // par.mp
        mp_ar = coll(CollKind.REDUCE_SCATTER, shard, mp_span)
        mp_ag = coll(CollKind.ALL_GATHER, shard, mp_span)
    elif par.mp > 1:
        mp_ar = coll(CollKind.ALL_REDUCE, plans[0].mp_allreduce_entries, mp_span)
    cp_send = {}
    for p in plans:
        if p.cp_ring is not None:
            span = placement.cp_ring_span()
            cp_send[p.index] = (coll(CollKind.P2P, p.cp_ring.kv_entries, span),
                                coll(CollKind.P2P, 2 * p.cp_ring.kv_entries, span))
    # MP collectives of several sizes (framework "hf"): (entries, count) lists per direction
    mp_lists = {(p.index, d): [(coll(CollKind.ALL_REDUCE, e, mp_span), c) for e, c in colls]
                for p in plans for d, colls in (("fwd", p.mp_colls_fwd), ("bwd", p.mp_colls_bwd))
                if par.mp > 1 and (p.mp_colls_fwd or p.mp_colls_bwd)}
    p2p = [coll(CollKind.P2P, plans[0].p2p_entries, span) for span in p2p_spans]
    dp_ar: list[list[Collective]] = []
    dp_ag: list[list[Collective]] = []
    dp_ready: list[tuple[float, ...]] = []
    fsdp_colls: dict[int, tuple[Collective, ...]] = {}
    for p in plans:
        ready: tuple[float, ...] = ()
        if p.fsdp is not None:  # FSDP2: no DP collective after the backward; per micro-batch ones instead
            u = p.fsdp
            fsdp_colls[p.index] = (coll(CollKind.ALL_GATHER, u.layer_shard, dp_span),
                                   coll(CollKind.REDUCE_SCATTER, u.layer_shard, dp_span),
                                   coll(CollKind.ALL_GATHER, u.root_shard, dp_span),
                                   coll(CollKind.REDUCE_SCATTER, u.root_shard, dp_span))
            dp_ar.append([])
            dp_ag.append([])
        elif grad_ranks > 1 and p.dp_buckets is not None and p.grad_segments:
            buckets = _ddp_buckets(p.grad_segments, p.dp_buckets)
            ends = _segment_ends(p.grad_segments, fwd, bwd)
            dp_ar.append([coll(CollKind.ALL_REDUCE, e, dp_span) for e, _ in buckets])
            ready = tuple(ends[i] for _, i in buckets)
            dp_ag.append([])  # DDP keeps whole parameters on every replica: nothing to gather
        elif grad_ranks > 1 and training.reduce_scatters_grads:  # each bucket's shard stays on its rank
            # an fp32 gradient buffer (grad_reduce_in_fp32) reduces twice the 2-byte entries
            wide = training.grad_reduce_bytes // 2
            dp_ar.append([coll(CollKind.REDUCE_SCATTER, wide * e // grad_ranks, dp_span)
                          for e in _buckets(p.params, training.dp_bucket)])
            dp_ag.append([coll(CollKind.ALL_GATHER, e, dp_span)
                          for e in _buckets(p.params // grad_ranks, training.dp_bucket)])
        elif grad_ranks > 1:
            dp_ar.append([coll(CollKind.ALL_REDUCE, e, dp_span) for e in _buckets(p.params, training.dp_bucket)])
            shard = p.params // grad_ranks if training.zero_stage >= 1 else 0
            dp_ag.append([coll(CollKind.ALL_GATHER, e, dp_span) for e in _buckets(shard, training.dp_bucket)])
        else:
            dp_ar.append([])
            dp_ag.append([])
        dp_ready.append(ready)

    keys = list(wanted)
    if keys:
        secs = np.asarray(model.collective_seconds(keys), dtype=float)
        for c, t in zip(keys, secs.tolist(), strict=True):
            if math.isnan(t):
                t = closed_form_seconds(c, cluster)
                notes.append(f"no samples for {c.kind.value} over {c.nodes}x{c.gpus_per_node} GPUs; "
                             f"closed-form cost used")
            wanted[c] = t
    for c, t in wanted.items():
        if not (math.isfinite(t) and t >= 0):
            raise ConfigError("profile", f"{c.kind.value} of {c.entries} entries got a duration of {t!r} s")

    mp_s = (wanted[mp_ar] if mp_ar is not None else 0.0) + (wanted[mp_ag] if mp_ag is not None else 0.0)

    rs_s, ag_s = (wanted[mp_ar], wanted[mp_ag]) if mp_ag is not None and mp_ar is not None else (0.0, 0.0)

    def mp_total(p: StagePlan, direction: str, count: int, fwd: dict[Op, float], bwd: dict[Op, float]) -> float:
        listed = mp_lists.get((p.index, direction))
        if listed is not None:
            return sum(c * wanted[k] for k, c in listed)
        if p.tp_overlap_gemms is not None:
            return tp_overlapped(p, direction, count, rs_s, ag_s, fwd, bwd)
        return count * mp_s

    # What does not change between the power cap's compositions, once per plan: the MP all-reduces
    # priced where the flow shop runs them (``StagePlan.issue_mp``), FSDP2's copies, and the notes on
    # the sizes of the collectives that overlap compute
    mp_after: list[dict[tuple[str, OpKind], float]] = []
    copies: dict[int, FSDPCopies] = {}
    overlapped: list[float] = []  # every stage's: one note for the run
    for p in plans:
        after: dict[tuple[str, OpKind], float] = {}
        for pass_, kind, entries, count in p.issue_mp:
            price = wanted[coll(CollKind.ALL_REDUCE, entries, mp_span)]
            after[pass_, kind] = after.get((pass_, kind), 0.0) + count * price
        mp_after.append(after)
        s = p.index
        if s in fsdp_pass:
            copies[s] = fsdp_copies(p, upd[fsdp_pass[s]], model, notes)
        overlapped += [float(c.bytes) for c in fsdp_colls.get(s, ())[:1]] + \
            [float(c.bytes) for c in cp_send.get(s, ())]
        if dp_ar[s]:
            overlapped.append(sum(float(c.bytes) for c in dp_ar[s]) / len(dp_ar[s]))  # _interference's mean
    _interference_size_note(model, overlapped, notes)

    im = getattr(model, "interference", None)  # the profile's measured interference, if any
    cap: _PowerCap | None = getattr(model, "power_cap", None) if power_cap else None
    slowest_of = getattr(cap, "slowest_of", None)
    if slowest_of is not None:  # a synchronous job runs at its slowest GPU's pace
        cap = slowest_of(par.gpus)
    tc = _tensor_core_seconds(cap, ops)

    def compose(p: StagePlan, factor: float, fwd: dict[Op, float], bwd: dict[Op, float]) -> StageCost:
        s = p.index
        fwd_s = sum(oc.count * fwd[oc.op] for oc in p.forward)
        rec_s = sum(oc.count * fwd[oc.op] for oc in p.recompute)
        bwd_s = sum(oc.count * bwd[oc.op] for oc in p.backward) + rec_s
        fsdp_f = fsdp_b = 0.0
        accum_s = p.grad_accum_count * upd[p.grad_accum] if p.grad_accum is not None else 0.0
        in_steps = 0.0  # what measured interference adds to this stage's closed forms, per micro-batch
        if s in fsdp_colls:
            ag, rs, ag_root, rs_root = (wanted[c] for c in fsdp_colls[s])
            cp = copies.get(s, FSDPCopies(0.0, 0.0, 0.0, 0.0))
            # the all-gather waits on its stream for its copy-in: one span with the collective
            ag, ag_root = ag + cp.gather_in_layer, ag_root + cp.gather_in_root
            # every copy runs on the compute stream: the gathers' copy-outs, and the reduce-scatter's
            # copy-in (torch >= 2.6 ``foreach_reduce``: ``foreach_reduce_scatter_copy_in`` on the
            # current stream, then ``reduce_scatter_stream.wait_stream``; the lent hosts run 2.11)
            slow = (1.0, 1.0, 1.0)
            if im is not None:  # the gathers and reduce-scatters that overlap compute slow it, and it them
                size = float(fsdp_colls[s][0].bytes)
                slow = (_compute_factor(im, p.forward, fwd, size) or 1.0,
                        _compute_factor(im, p.backward, bwd, size) or 1.0, im.collective_factor(None, size))
            fsdp_f, fsdp_b = fsdp_exposed(p, ag, rs, ag_root, rs_root, fwd, bwd, slow)
            alone_f, alone_b = fsdp_exposed(p, ag, rs, ag_root, rs_root, fwd, bwd)
            in_steps += (fsdp_f - alone_f) + (fsdp_b - alone_b)
            fsdp_f += p.encoders * cp.out_layer + cp.out_root  # the forward gathers' copy-outs
            # the backward's: the layers' gathers' copy-outs, every unit's reduce-scatter copy-in (the root
            # stays gathered after the forward)
            fsdp_b += p.encoders * (cp.out_layer + cp.cat_layer) + cp.cat_root
        f_flops, b_flops = p.flops()
        cp_f = cp_b = cp_ring = cp_one = 0.0
        if s in cp_send:
            one_f, one_b = (wanted[c] for c in cp_send[s])
            cp_slow = (1.0, 1.0, 1.0, 1.0)
            if im is not None:  # the attention and the K/V send beside it slow each other
                b_f, b_b = (float(c.bytes) for c in cp_send[s])
                cp_slow = (im.compute_factor("attention", b_f), im.collective_factor("attention", b_f),
                           im.compute_factor("attention", b_b), im.collective_factor("attention", b_b))
            cp_f, cp_b = cp_exposed(p, one_f, one_b, fwd, bwd, cp_slow)
            plain_f, plain_b = cp_exposed(p, one_f, one_b, fwd, bwd)
            in_steps += (cp_f - plain_f) + (cp_b - plain_b)
            assert p.cp_ring is not None
            cp_ring, cp_one = (p.cp_ring.ranks - 1) * p.cp_ring.layers * (one_f + one_b), one_f
        mp_f = mp_total(p, "fwd", p.mp_allreduces_fwd, fwd, bwd)  # each composition's MP time, once
        mp_b = mp_total(p, "bwd", p.mp_allreduces_bwd, fwd, bwd)
        ag_total = sum(wanted[c] for c in dp_ag[s])
        ag_hidden = min(ag_total, fwd_s) if training.overlap_param_gather else 0.0
        ag_exposed = ag_total - ag_hidden
        host = host_fields(model, p, fwd_s, bwd_s, mp_f, mp_b, upd[p.optimizer] + accum_s, notes, (fwd, bwd),
                           mp_after[s], par)
        return StageCost(
            index=s,
            fwd_compute_s=fwd_s,
            bwd_compute_s=bwd_s,
            recompute_s=rec_s,
            mp_fwd_s=mp_f,
            mp_bwd_s=mp_b,
            mp_allreduce_s=mp_s,
            mp_fwd_count=p.mp_allreduces_fwd if par.mp > 1 else 0,
            mp_bwd_count=p.mp_allreduces_bwd if par.mp > 1 else 0,
            p2p_fwd_s=wanted[p2p[s]] if s < par.pp - 1 else 0.0,
            p2p_bwd_s=wanted[p2p[s - 1]] if s > 0 else 0.0,
            dp_bucket_s=tuple(wanted[c] for c in dp_ar[s]),
            dp_allgather_s=ag_exposed,
            dp_allgather_hidden_s=ag_hidden,
            optimizer_s=upd[p.optimizer],
            params=p.params,
            fwd_flops=f_flops,
            bwd_flops=b_flops,
            # an all-reduce's buffer; under sequence parallelism the reduce-scatter and all-gather of its
            # 1/mp shards load the links as the all-reduce of the whole does
            mp_allreduce_bytes=float(2 * p.mp_allreduce_entries) if mp_ar is not None else 0.0,
            p2p_bytes=float(2 * p.p2p_entries),
            dp_bucket_bytes=tuple(float(c.bytes) for c in dp_ar[s]),
            # the exposed part of the all-gather moves its share of the bytes (same rate as the whole)
            dp_allgather_bytes=float(sum(c.bytes for c in dp_ag[s])) * (ag_exposed / ag_total if ag_total else 1.0),
            dp_reduce_kind=dp_ar[s][0].kind if dp_ar[s] else CollKind.ALL_REDUCE,
            interference_in_steps_s=in_steps,
            cp_fwd_s=cp_f, cp_bwd_s=cp_b, cp_ring_s=cp_ring, cp_send_s=cp_one,
            cp_bytes=float(2 * p.cp_ring.kv_entries) if p.cp_ring is not None else 0.0,
            grad_accum_s=accum_s,
            dp_bucket_ready=dp_ready[s],
            fsdp_fwd_s=fsdp_f, fsdp_bwd_s=fsdp_b,
            **_interference(model, p, bwd, [float(c.bytes) for c in dp_ar[s]]),
            **host,
            host_ahead=bool(host) and issues_ahead(p),
            compute_bound_s=_compute_bound_s(p, fwd, bwd, tc), power_cap_factor=factor,
        )

    stages = [compose(p, 1.0, fwd, bwd) for p in plans]
    if cap is not None and tc:
        from trainsim.sim.eq7 import eq7

        def shares_of(stages: list[StageCost]) -> list[float]:
            it = IterationCosts(stages=tuple(stages), micro_batches=training.micro_batches, parallelism=par,
                                mp_span=mp_span, dp_span=dp_span, p2p_spans=p2p_spans)
            return power_cap_shares(it, eq7(it).iteration_s)

        base = stages
        shares = shares_of(stages)
        kinds = sorted({k for _, k in tc.values()})  # the GEMM precisions this run has
        # what fills each stage's time off the tensor cores (its operators' measured classes; 0 without them)
        weights = _filler_weights(cap, fwd, bwd, upd)
        classes = [filler_share(p, training.micro_batches, fwd, bwd, upd, tc, weights) for p in plans]
        if any(cap.factor(k, d, w) > 1.0 for d, w in zip(shares, classes, strict=True) for k in kinds):
            burst_fwd, burst_bwd = _burst_tables(fwd, bwd, tc, cap, weights)  # the samples' own cap taken out
            for _ in range(3):  # the slowed kernels lengthen the iteration, which lowers the share: a fixed point
                stages = [compose(p, cap.factor("bf16", d, w), *_sustained(burst_fwd, burst_bwd, tc, cap, d, w))
                          for p, d, w in zip(plans, shares, classes, strict=True)]
                shares = shares_of(stages)
            stages = [dataclasses.replace(st, power_cap_s=(st.fwd_compute_s + st.bwd_compute_s)
                                          - (b.fwd_compute_s + b.bwd_compute_s))
                      for st, b in zip(stages, base, strict=True)]
            worst = max(range(len(stages)), key=lambda i: shares[i])
            factors = ", ".join(f"{k} x{cap.factor(k, shares[worst], classes[worst]):.3f}" for k in kinds)
            # what that stage's samples of long kernels already carried of the cap, per micro-batch
            taken = _compute_s(plans[worst], fwd, bwd) - _compute_s(plans[worst], burst_fwd, burst_bwd)
            if any(st.power_cap_s != 0 for st in stages):
                slowest = f", the slowest of {par.gpus} GPUs" if par.gpus > 1 and getattr(cap, "spread", None) else ""
                fill = (f" beside other work of filler class {classes[worst]:.2f} (0: copies, 1: GELUs)"
                        if getattr(cap, "filler_class", None) else "")
                owned = (f"; its samples of kernels longer than a few ms were timed partly capped already, "
                         f"{taken * 1e3:.3g} ms a micro-batch, which is taken out first" if taken > 0 else "")
                notes.append(f"power cap ({cap.gpu}, the profile's power_cap.json): a GPU in tensor-core work "
                             f"{100 * shares[worst]:.0f} % of the iteration{fill} runs it slower than a burst "
                             f"({factors}; stage {worst}{slowest}){owned}; profile.power_cap: false prices the samples")
    _fsdp_overlap_note([st for p, st in zip(plans, stages, strict=True) if p.runtime == "fsdp2"], notes)
    return IterationCosts(
        stages=tuple(stages), micro_batches=training.micro_batches, parallelism=par,
        mp_span=mp_span, dp_span=dp_span, p2p_spans=p2p_spans, notes=tuple(dict.fromkeys(notes)),
    )


def _fsdp_overlap_note(stages: Sequence[StageCost], notes: list[str]) -> None:
    """A note where FSDP2's host excess and its waits for collectives are both a large part of a
    micro-batch's step (:func:`sim.exposed.fsdp_host_overlap`; ``stages``: those of the FSDP2 runtime
    alone, as measured; under FSDP2 x TP the sum was centred): the stage where the most is in question."""
    parts = [(st.index, st.host_fwd_extra_s + st.host_bwd_extra_s, st.fsdp_fwd_s + st.fsdp_bwd_s, st.fwd_s + st.bwd_s)
             for st in stages]
    if not parts:
        return
    share, index, host, fsdp = max(((fsdp_host_overlap(h, f, step), i, h, f) for i, h, f, step in parts),
                                   key=lambda t: t[0])  # the first stage of the largest share
    if share >= FSDP_OVERLAP_NOTE_SHARE:
        notes.append(f"FSDP2 (stage {index}): the host's excess over the compute ({1e3 * host:.1f} ms a "
                     f"micro-batch) and the collectives and copies the GPU waits for ({1e3 * fsdp:.1f} ms) are "
                     f"added, as if the host never issued while the GPU waited: {100 * share:.0f} % of the "
                     "micro-batch's step is in question; measured FSDP2 runs with 5-30 % in question ran faster than "
                     "predicted by half of it to all of it on average (docs/multi_gpu.md, \"FSDP2's host and "
                     "collectives, counted twice\")")


def model_flops(costs: IterationCosts, micro_batches: int, mp: int, dp: int) -> float:
    """Model FLOPs of one iteration over all GPUs: every stage's forward and backward FLOPs (the
    recomputed forward not counted, as MFU defines it) per micro-batch, times micro-batches, MP, DP
    and CP (each CP rank computes its share of the sequence)."""
    return sum(s.fwd_flops + s.bwd_flops for s in costs.stages) * micro_batches * mp * dp * costs.parallelism.cp


def mfu(model_flops: float, iteration_s: float, gpus: int, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: ``model_flops / (iteration_s * gpus * peak_flops)``; None without a
    peak or a positive iteration time."""
    if not peak_flops or not iteration_s > 0:
        return None
    return model_flops / (iteration_s * gpus * peak_flops)
