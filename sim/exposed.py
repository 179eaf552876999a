"""Communication that overlaps compute, and what of it shows: FSDP2's all-gathers and
reduce-scatters with their copies, sequence parallelism's overlapped TP collectives (Transformer
Engine) and context parallelism's K/V ring, each beside the compute that hides it, with the measured
compute-communication interference (:func:`overlap_excess`). :mod:`sim.costs` prices the collectives
and composes these into a stage's step times.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from trainsim.operators import DurationModel, Op, StagePlan
from trainsim.operators.ops import hf_params


def fsdp_full_pass(plan: StagePlan) -> Op:
    """The fp32 accumulation pass over the stage's whole (unsharded) parameters: the measured
    memory-bound kernel FSDP2's copies are priced by (``plan.grad_accum`` runs on the 1/dp shard)."""
    assert plan.grad_accum is not None and plan.fsdp is not None
    return dataclasses.replace(plan.grad_accum, mp=plan.grad_accum.mp // plan.fsdp.ranks)


class FSDPCopies(NamedTuple):
    """Seconds of FSDP2's copies per gather or reduce-scatter of one layer unit and of the root unit:
    the all-gather's copy-in (``gather_in``: the rank's shards into the flat input, on the
    all-gather's stream before the collective), its copy-out (``out``: into the unsharded
    parameters, on the compute stream) and the reduce-scatter's copy-in (``cat``: ``_chunk_cat`` of
    the unsharded gradients, on the compute stream)."""

    out_layer: float
    cat_layer: float
    out_root: float
    cat_root: float
    gather_in_layer: float = 0.0
    gather_in_root: float = 0.0


def fsdp_copies(plan: StagePlan, full_pass_s: float, model: DurationModel, notes: list[str]) -> FSDPCopies:
    """Seconds of FSDP2's copies of the stage's units (:class:`FSDPCopies`).

    FSDP2 copies the rank's shards into one flat buffer (``all_gather_copy_in``: ``_foreach_copy_``,
    on the all-gather's copy-in stream, which the collective waits for), all-gathers it and copies
    the result out into the unsharded parameters (``foreach_all_gather_copy_out``:
    ``split_with_sizes_copy``, on the compute stream), and copies the unsharded gradients into the
    reduce-scatter's input (``_chunk_cat``, also on the compute stream since torch 2.6, before the
    reduce-scatter stream waits for it; earlier versions ran it on that stream). The copy-out and
    ``_chunk_cat`` read and write the unit's fp32 values, 8 bytes per parameter; the copy-in the
    rank's shard of them, 1/dp of that. Priced from the profile's measured copy kernels
    (``fsdp_copies.json``, :mod:`trainsim.calibration.fsdp_copies`); a profile without them prices
    the copy-out and ``_chunk_cat`` at the rate of its measured accumulation pass over the same
    parameters (12 bytes per parameter: read two gradients, write one), which runs 6-28 % faster per
    byte than the copies (H100 and H200, hidden 1024-8192), and leaves the copy-in uncharged, as does
    a table without its curve.
    """
    assert plan.grad_accum is not None and plan.fsdp is not None
    u = plan.fsdp
    fp32_entries = 2  # the shards are counted in 2-byte entries
    layer_bytes = 8 * u.layer_shard * u.ranks / fp32_entries
    root_bytes = 8 * u.root_shard * u.ranks / fp32_entries
    rates = getattr(model, "fsdp_copies", None)
    if rates is None:
        per_byte = full_pass_s / (12 * hf_params(fsdp_full_pass(plan)))
        return FSDPCopies(layer_bytes * per_byte, layer_bytes * per_byte, root_bytes * per_byte,
                          root_bytes * per_byte)
    outside: list[float] = []

    def price(op: str, nbytes: float) -> float:
        secs, measured = rates.seconds(op, u.ranks, nbytes)
        if not measured and nbytes > 0:
            outside.append(nbytes)
        return secs

    gathered_in = rates.has("copy_in")
    copies = FSDPCopies(price("copy_out", layer_bytes), price("chunk_cat", layer_bytes),
                        price("copy_out", root_bytes), price("chunk_cat", root_bytes),
                        price("copy_in", layer_bytes / u.ranks) if gathered_in else 0.0,
                        price("copy_in", root_bytes / u.ranks) if gathered_in else 0.0)
    if outside:  # one note for the stage's copies
        notes.append(f"profile {getattr(model, 'name', '?')!r}: FSDP2's copies of {min(outside) / 2**20:.0f}-"
                     f"{max(outside) / 2**20:.0f} MiB over {u.ranks} ranks are outside its measured copies "
                     f"(fsdp_copies.json); priced at the nearest measured rate")
    return copies


def overlap_excess(coll: float, comp: float, f: float = 1.0, g: float = 1.0) -> float:
    """What a communication of ``coll`` seconds alone adds beyond a computation of ``comp`` seconds
    alone when both start together on one GPU and slow each other (measured interference: compute at
    1/f of its speed while the communication runs, the communication at 1/g while compute runs;
    whichever is left runs at full speed after the other ends). If the communication ends first
    (coll g <= comp f) it adds coll g (1 - 1/f); else comp f (1 - 1/g) + coll - comp. With f = g = 1,
    max(0, coll - comp)."""
    if coll * g <= comp * f:
        return coll * g * (1.0 - 1.0 / f)
    return max(0.0, coll - comp + comp * f * (1.0 - 1.0 / g))


def fsdp_exposed(plan: StagePlan, ag_layer: float, rs_layer: float, ag_root: float, rs_root: float,
                  fwd: dict[Op, float], bwd: dict[Op, float],
                  slow: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> tuple[float, float]:
    """FSDP2 communication a micro-batch's forward and backward cannot hide (seconds).

    The next layer's all-gather runs on its own stream while this layer computes (FSDP2's implicit
    prefetch), so per layer only its excess over the compute shows; what has nothing to hide
    behind shows whole: the root's all-gather (embedding, norm, LM head; not resharded after the
    forward) and the first layer's before the forward, and at the end of the backward the last
    reduce-scatters. In the backward a layer's all-gather and the previous layer's reduce-scatter
    share the communicator, so they queue. Layers are taken as equal (one GradSegment's compute).

    ``slow`` = (forward compute factor f, backward compute factor, collective factor g):
    measured compute-communication interference (calibration/interference.py). A layer's
    collectives and its compute start together and slow each other (:func:`overlap_excess`); the
    collectives with nothing to overlap run at full speed.
    """
    f_fwd, f_bwd, g = slow
    layers = [seg for seg in plan.grad_segments if seg.layer]
    n = len(layers)
    if n == 0:
        return ag_root, rs_root
    seg = layers[0]
    c_f = sum(oc.count * fwd[oc.op] for oc in seg.ops)
    c_b = sum(oc.count * bwd[oc.op] for oc in seg.ops) + sum(oc.count * fwd[oc.op] for oc in seg.recompute)
    head = plan.grad_segments[0] if plan.role.has_head else None
    c_head = sum(oc.count * bwd[oc.op] for oc in head.ops) if head is not None else 0.0
    exposed_f = ag_root + ag_layer + (n - 1) * overlap_excess(ag_layer, c_f, f_fwd, g)
    exposed_b = (overlap_excess(ag_layer, c_head, f_bwd, g)
                 + (n - 1) * overlap_excess(ag_layer + rs_layer, c_b, f_bwd, g) + rs_layer + rs_root)
    return exposed_f, exposed_b


#: The share of a micro-batch's step from which :func:`fsdp_host_overlap` is noted: below it the
#: committed FSDP2 tables are centred (docs/multi_gpu.md, "FSDP2's host and collectives, counted twice").
FSDP_OVERLAP_NOTE_SHARE = 0.05


def fsdp_host_overlap(host_extra_s: float, fsdp_s: float, step_s: float) -> float:
    """The share of an FSDP2 micro-batch's step (``step_s``, forward and backward) that the host's
    excess over the compute (``host_extra_s``) and the collectives and copies the GPU waits for
    (``fsdp_s``) could both claim. The step adds the two, as if the host never issued while the GPU
    waited for a gather; the longer of the two alone would be the other limit. Neither composition
    is the measured one (the flow shop tried between them: docs/multi_gpu.md), so the simulation keeps
    the sum and says how much of it is in question."""
    return min(host_extra_s, fsdp_s) / step_s if step_s > 0 else 0.0


def tp_overlapped(plan: StagePlan, direction: str, count: int, rs_s: float, ag_s: float,
                   fwd: dict[Op, float], bwd: dict[Op, float]) -> float:
    """Sequence parallelism's MP syncs under Transformer Engine's communication overlap (seconds per
    micro-batch and direction).

    Per layer, the all-gather before each column-parallel GEMM (QKV, MLP up) and the reduce-scatter
    after each row-parallel one (attention output, MLP down) are split into chunks pipelined with
    that GEMM, so each shows only its excess over the GEMM (in the backward, over the GEMM's
    backward). The pipeline's fill is not priced, nor the SMs the communication kernels take from
    the GEMM. The syncs beyond the layers' (the embedding's; a full recompute re-runs the forward's,
    overlapped alike) are exposed whole.
    """
    assert plan.tp_overlap_gemms is not None
    qkv, out, up, down = plan.tp_overlap_gemms

    def per_layer(table: dict[Op, float]) -> float:
        return (max(0.0, ag_s - table[qkv]) + max(0.0, rs_s - table[out])
                + max(0.0, ag_s - table[up]) + max(0.0, rs_s - table[down]))

    layers = plan.encoders
    overlapped = 2 * layers  # each layer's two MP syncs are the four overlapped collectives
    exposed = layers * per_layer(fwd if direction == "fwd" else bwd)
    if direction == "bwd" and count >= 2 * overlapped:  # a full recompute re-runs the forward's syncs
        exposed += layers * per_layer(fwd)
        overlapped *= 2
    return exposed + max(0, count - overlapped) * (rs_s + ag_s)


def cp_exposed(plan: StagePlan, send_fwd: float, send_bwd: float, fwd: dict[Op, float],
                bwd: dict[Op, float], slow: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
                ) -> tuple[float, float]:
    """Context parallelism's ring communication a micro-batch's forward and backward cannot hide.

    Each of a layer's ``cp - 1`` ring steps sends a K/V chunk while the attention computes on the
    chunk already there (Transformer Engine's P2P ring), so a step shows only its send's excess over
    one of the ring's attention calls; the backward sends K/V and their gradients over the
    attention's backward. A recompute that re-runs the attention re-runs its forward ring too.
    ``slow`` = (attention's slowdown beside the forward send, the send's beside the attention, the
    same two for the backward): the measured interference of :func:`overlap_excess`, so a send the
    attention hides still costs the attention the time it ran slower.
    """
    ring = plan.cp_ring
    if ring is None:
        return 0.0, 0.0
    steps = (ring.ranks - 1) * ring.layers
    att = ring.attention
    f_f, g_f, f_b, g_b = slow
    exposed_f = steps * overlap_excess(send_fwd, fwd[att], f_f, g_f)
    exposed_b = steps * overlap_excess(send_bwd, bwd[att], f_b, g_b)
    if any(oc.op == att for oc in plan.recompute):
        exposed_b += exposed_f
    return exposed_f, exposed_b
