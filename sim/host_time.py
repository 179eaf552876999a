"""The host's share of a step: the runtime's measured host (CPU) cost per layer and micro-batch
(calibration/host_overhead.py), and what of it the GPU waits for.

Where host and GPU work overlap only the host's excess shows. A runtime whose micro-batches start
synchronised with the GPU (Hugging Face's causal mask) runs a two-machine flow shop per micro-batch
(:func:`issue_flow_shop`): the host issues the operators in order and the GPU runs each once issued,
so the GPU idles behind runs of cheap kernels even when the step's host total is below its GPU total.
Where a runtime's ranks meet inside every layer, a host-bound step takes the slowest rank's host time
(:func:`trainsim.operators.stages.slowest_rank_factor`). :func:`host_fields` gives a stage's
:class:`sim.costs.StageCost` host fields; :mod:`sim.costs` composes them with the rest.
"""

from __future__ import annotations

from trainsim.operators import DurationModel, Op, OpKind, StagePlan
from trainsim.operators.spec import Parallelism
from trainsim.operators.stages import ISSUE_AHEAD_PIPELINES, WRAPPED_RUNTIMES, meeting_ranks, slowest_rank_factor

#: Runtimes whose host waits for the GPU at each micro-batch's start (Hugging Face's causal-mask
#: construction) and then issues it operator by operator: their host excess is a flow shop's idle
#: time (:func:`issue_flow_shop`). DTensor TP's too, alone or inside FSDP2 (torchtitan's 2D), with
#: its all-reduces on the GPU in issue order (at GPU-bound shapes its forward issues about as fast
#: as the GPU runs it: docs/multi_gpu.md, "GPU-bound shapes"). FSDP2's own host work gathers in its
#: hooks at the layer boundaries (the shop on it was tried twice and left out; a shop of host,
#: communicator and GPU too: validation/experiments/fsdp_flow_shop.py), and the pipelining
#: runtime's stages do not synchronise per micro-batch.
FLOW_SHOP_RUNTIMES = frozenset({"eager", "ddp", "dtensor_tp", "fsdp2_tp"})
#: Runtimes whose GPU-bound steps were measured slower than predicted on almost every row
#: (docs/multi_gpu.md, "GPU-bound shapes": FSDP2 by a mean 2-4 % per layout on 2 and 4 H200s; DTensor
#: TP, alone and under FSDP2, by 5-14 % on the H100 tables, whose hosts' rank lag was not measured):
#: a prediction whose steps the GPU paces says so in a note, unless the profile's measured rank lag
#: (calibration/rank_spread.py) already prices the runtime's slowest rank
UNDER_PREDICTED_RUNTIMES = frozenset({"dtensor_tp", "fsdp2", "fsdp2_tp"})
#: The share of a micro-batch's host work issued in its forward, for the runtimes whose host time is
#: split per step rather than spread over their operators: measured with the GPU drained before each
#: micro-batch (validation/probe_host_split.py, 4x H100, validation/host_split_h100_4gpu/host_split.jsonl;
#: the median over its tiny and real shapes): FSDP2 0.42 (its fsdp2 and fsdp4 rows); a pipeline's stages
#: take their runtime's without the pipeline, eager 0.44 (the 1gpu rows) and DTensor TP 0.49 (tp2, tp4).
#: The GPU's own split is about 1:2 (0.33): Python issues a forward operator more slowly than the
#: autograd engine a backward one. The flow-shop runtimes spread the line over their operators instead
#: (:func:`issue_order`); the Megatron-style runtimes, not probed, keep the GPU's split.
HOST_FORWARD_SHARE: dict[str, float] = {"fsdp2": 0.42, "eager_pp": 0.44, "dtensor_tp_pp": 0.49}


def stage_head_tail(plan: StagePlan, head_tail: dict[str, float] | None) -> dict[str, float]:
    """The parts of a micro-batch's host work outside its layers that this stage runs, in layers
    (the runtime table's ``head_tail``, calibration/host_overhead.py): the head where the stage has
    the embedding, the tail where it has the LM head; zeros where the table has none."""
    ht = head_tail or {}
    head, tail = plan.role.has_embedding, plan.role.has_head
    return {"head_fwd": ht.get("head_fwd", 0.0) if head else 0.0, "head_bwd": ht.get("head_bwd", 0.0) if head else 0.0,
            "tail_fwd": ht.get("tail_fwd", 0.0) if tail else 0.0, "tail_bwd": ht.get("tail_bwd", 0.0) if tail else 0.0}


def issue_flow_shop(plan: StagePlan, fwd: dict[Op, float], bwd: dict[Op, float],
                    host_per_layer_s: float, checkpoint_s: float = 0.0,
                    head_tail: dict[str, float] | None = None,
                    mp_after: dict[tuple[str, OpKind], float] | None = None) -> tuple[float, float, float] | None:
    """The GPU's idle time in one micro-batch's forward and backward, and its backlog when the host
    has issued the last backward operator, for a runtime that synchronises host and GPU at each
    micro-batch's start (Hugging Face's causal-mask construction; None: the plan has no issue order).

    A two-machine flow shop: the host issues the operators in order (``plan.issue_*``: the head, the
    layers, the tail; the backward in reverse, each checkpointed layer's recompute first), each
    taking ``h`` seconds of host time, and the GPU runs each once it is issued and the previous one
    is done. ``h`` spreads the fitted host line (``host_per_layer_s`` per layer and micro-batch,
    forward and backward, calibration/host_overhead.py) evenly over the operators a micro-batch
    issues without recompute; a recompute re-issues its operators at the same ``h``. Where a run of
    cheap kernels (norms, element-wise) comes faster than the host issues it, the GPU idles even if
    the step's host total is below its GPU total: what a per-step max(host, GPU) misses. Measured:
    one H100, d1024-L12 b4, 4.7 ms per micro-batch short of the measurement before this term, 3.0 ms
    of it here (docs/multi_gpu.md, "One GPU, micro-batch by micro-batch").

    A checkpointed layer (``plan.issue_recompute``) costs the host ``checkpoint_s`` more than issuing
    its operators: ``torch.utils.checkpoint``'s own work in the backward (restoring the RNG states,
    detaching the inputs, the nested backward), charged before the layer's recompute. Its forward
    runs without recording a graph, which offsets saving the RNG states; the probe that measured
    ``checkpoint_s`` does not tell the split (validation/fit_checkpoint_overhead.py, docs/h100.md).

    ``head_tail`` (the runtime table's, in layers; :func:`stage_head_tail`): the head's and the
    tail's own host work, measured (validation/probe_head_host.py). Then a layer's host time is
    spread evenly over its forward and backward operators, and the head's and the tail's over
    theirs in each direction: after the synchronisation the GPU waits out the whole head (the
    causal mask, the rotary tables), not an average operator's share. Without it, the line is
    spread evenly over every operator issued. A recompute re-issues its operators at a layer
    operator's forward rate.

    ``mp_after`` (DTensor tensor parallelism, ``plan.issue_mp`` priced): GPU seconds of the MP
    all-reduces that follow an operator of that kind in that pass ("fwd", "bwd", "rec"). The
    compute stream waits for them; the host does not, so it gains on the GPU meanwhile.
    """
    order = issue_order(plan, fwd, bwd, host_per_layer_s, checkpoint_s, head_tail, mp_after)
    if order is None:
        return None
    host = gpu = 0.0
    idle = [0.0, 0.0]
    for part, ops in enumerate(order):
        for issue, price, allreduce in ops:
            host += issue
            start = max(gpu, host)
            idle[part] += start - gpu
            gpu = start + price + allreduce
    return idle[0], idle[1], max(0.0, gpu - host)


def issue_order(plan: StagePlan, fwd: dict[Op, float], bwd: dict[Op, float], host_per_layer_s: float,
                checkpoint_s: float = 0.0, head_tail: dict[str, float] | None = None,
                mp_after: dict[tuple[str, OpKind], float] | None = None
                ) -> tuple[list[tuple[float, float, float]], list[tuple[float, float, float]]] | None:
    """One micro-batch's operators in the order the host issues them, forward and backward (None: the
    plan has no issue order): per operator (host seconds to issue it, its GPU seconds, the GPU seconds
    of the MP all-reduces after it), as :func:`issue_flow_shop` says. Shared with
    validation/experiments/rank_lag_flow_shop.py, which couples several ranks' orders."""
    if not plan.issue_layer:
        return None
    n = plan.encoders
    head, layer, tail = plan.issue_head, plan.issue_layer, plan.issue_tail
    # host time to issue one operator of the (head, a layer, the tail), forward and backward; by
    # position, as one operator may be both a layer's and an end's (a norm)
    if head_tail is None:  # even
        h = host_per_layer_s * n / (2 * (len(head) + n * len(layer) + len(tail)))
        issue_f = issue_b = (h, h, h)
    else:
        ends = stage_head_tail(plan, head_tail)
        per, h = host_per_layer_s, host_per_layer_s / (2 * len(layer))
        issue_f = (ends["head_fwd"] * per / max(1, len(head)), h, ends["tail_fwd"] * per / max(1, len(tail)))
        issue_b = (ends["head_bwd"] * per / max(1, len(head)), h, ends["tail_bwd"] * per / max(1, len(tail)))
    after = mp_after or {}

    def row(op: Op, table: dict[Op, float], issue: float, pass_: str) -> tuple[float, float, float]:
        return issue, table[op], after.get((pass_, op.kind), 0.0)

    forward = [row(op, fwd, issue_f[0], "fwd") for op in head] + [row(op, fwd, issue_f[1], "fwd") for op in layer] * n \
        + [row(op, fwd, issue_f[2], "fwd") for op in tail]
    # a checkpoint's own work precedes its layer's recompute (restoring the RNG, detaching the
    # inputs), which re-issues its forward
    backward = [row(op, bwd, issue_b[2], "bwd") for op in reversed(tail)]
    for _ in range(n):
        backward += [row(op, fwd, issue_f[1] + (checkpoint_s if i == 0 else 0.0), "rec")
                     for i, op in enumerate(plan.issue_recompute)]
        backward += [row(op, bwd, issue_b[1], "bwd") for op in reversed(layer)]
    backward += [row(op, bwd, issue_b[0], "bwd") for op in reversed(head)]
    return forward, backward


def host_machine_factors(table: dict[str, dict]) -> dict[str, float]:
    """Each machine's host-speed factor in a profile's host table (calibration/host_overhead.py). The
    spread of the host's speed is the machines', whichever runtime measured it: two machines that
    agree on one runtime do not make the kind's hosts agree."""
    return {m: f for e in table.values() for m, f in (e.get("lease_factors") or {}).items()}


def host_entry(table: dict, runtime: str) -> tuple[dict | None, str | None]:
    """``runtime``'s line in a profile's host table: (the entry, the runtime standing in for it, if
    one had to); (None, None) where neither is there. A table may lack a pipeline's stages (measured
    before pipelines were: the runtime without its ``_pp`` stands in) or DDP (fitted before DDP had a
    line of its own: the eager model it wraps, ``WRAPPED_RUNTIMES``)."""
    if runtime in table:
        return table[runtime], None
    stand_in = WRAPPED_RUNTIMES.get(runtime, runtime.removesuffix("_pp"))
    return (table[stand_in], stand_in) if stand_in != runtime and stand_in in table else (None, None)


def host_fields(model: DurationModel, plan: StagePlan, fwd_s: float, bwd_s: float, mp_fwd: float,
                 mp_bwd: float, update_s: float, notes: list[str],
                 prices: tuple[dict[Op, float], dict[Op, float]] | None = None,
                 mp_after: dict[tuple[str, OpKind], float] | None = None,
                 par: Parallelism | None = None) -> dict[str, float]:
    """A stage's host-time fields (StageCost) from the profile's table of its runtime, if any.

    The per-layer host time of a micro-batch is split between its forward and backward as measured
    for the runtime (:data:`HOST_FORWARD_SHARE`), else as their GPU compute is (an approximation);
    the per-iteration part goes with the update. Where host and GPU work overlap, only the host's
    excess over the GPU's is added; for the eager runtime without a pipeline, whose micro-batches
    start synchronised, the GPU's idle time of the host-GPU flow shop (:func:`issue_flow_shop`,
    given the operators' ``prices``).
    """
    table = getattr(model, "host_overhead", None)
    if plan.runtime is None or not table:
        return {}
    entry, stand_in = host_entry(table, plan.runtime)
    if stand_in is not None:
        notes.append(f"profile {model.name!r} has no host cost for the {plan.runtime} runtime; "
                     + (f"its stages are priced with the {stand_in} runtime's" if plan.runtime.endswith("_pp")
                        else f"it is priced with the {stand_in} runtime's, which it wraps"))
    if entry is None:
        notes.append(f"profile {model.name!r} has no host cost for the {plan.runtime} runtime; "
                     "its steps are priced by their GPU work alone")
        return {}
    head_tail = entry.get("head_tail")  # the micro-batch's host work outside its layers, in layers
    # where a TP group's ranks meet inside every layer, a micro-batch waits
    # for the slowest of their hosts (``par``: the layout; none given, one rank)
    ranks = meeting_ranks(plan.runtime, par.mp) if par is not None else 1
    lag = slowest_rank_factor(ranks, float(entry.get("rank_sigma", 0.0)), entry.get("rank_lag"))
    per_layer_s = entry["per_layer_s"] * lag
    per_mb = per_layer_s * (plan.encoders + sum(stage_head_tail(plan, head_tail).values()))
    total = fwd_s + bwd_s
    share = HOST_FORWARD_SHARE.get(plan.runtime, fwd_s / total if total > 0 else 1 / 3)
    host_f = per_mb * share
    host_b = per_mb - host_f
    checkpoint_s = float(entry.get("checkpoint_s", 0.0)) * lag if plan.issue_recompute else 0.0
    host_b += checkpoint_s * plan.encoders  # torch.utils.checkpoint's own work (issue_flow_shop)
    serial = entry["overlap"] == "serial"

    def extra(host: float, gpu: float) -> float:
        return host if serial else max(0.0, host - gpu)

    ahead = entry["overlap"] == "ahead"
    gpu_f, gpu_b = fwd_s + mp_fwd, bwd_s + mp_bwd  # a step's GPU work: compute and MP collectives
    host, gpu = host_f + host_b, gpu_f + gpu_b
    host_bound = host > gpu if ahead else host_f > gpu_f or host_b > gpu_b
    if lag > 1.0 and (serial or host_bound):
        notes.append(f"the {plan.runtime} runtime's {ranks} ranks meet inside every layer, so its host-bound steps "
                     f"take as long as the slowest of their hosts: x{lag:.3f} a typical rank's ("
                     + ("measured" if ranks in (entry.get("rank_lag") or {}) else
                        f"not measured for {ranks} ranks: a normal spread of rank_sigma {entry['rank_sigma']:.3f}")
                     + "; calibration/rank_spread.py)")
    factors = host_machine_factors(table)
    if len(factors) > 1 and (serial or host_bound):
        lo, hi = min(factors.values()), max(factors.values())
        notes.append(f"the {plan.runtime} runtime's host (CPU) work sets the pace of its steps; that host cost "
                     f"differed x{lo:.2f} to x{hi:.2f} between the {len(factors)} machines of this kind measured "
                     "(calibration/host_overhead.py, host_factors.py), and a host-bound step varies as much; within "
                     "one run its iterations wander 6-24 % above the fastest, which the host lines describe "
                     "(docs/multi_gpu.md)")
    elif plan.runtime in UNDER_PREDICTED_RUNTIMES and lag == 1.0:
        notes.append(f"the {plan.runtime} runtime ran slower than predicted on almost every run measured where the "
                     "GPU sets the pace (by how much per layout: docs/multi_gpu.md, \"GPU-bound shapes\")")

    # The per-iteration host work (optimizer issue, zero_grad, the losses) starts once the last
    # micro-batch's backward is issued; the GPU still has that micro-batch's backlog to run (what
    # its GPU work exceeds its host work by: the host synchronises with the GPU once per
    # micro-batch, so no more) and then the update. Only what outlasts both shows.
    shop = (issue_flow_shop(plan, *prices, per_layer_s, checkpoint_s, head_tail, mp_after)
            if prices is not None and plan.runtime in FLOW_SHOP_RUNTIMES and not serial else None)
    if shop is not None:
        extra_f, extra_b, backlog = shop
    else:
        backlog = max(0.0, gpu - host)
        if ahead:
            # no host-GPU synchronisation inside the iteration: the host runs ahead over a whole
            # micro-batch, so only its excess over the micro-batch's GPU work shows (a per-step max
            # would add the forward's and the backward's excesses though the totals balance),
            # split as the host's work is
            excess = max(0.0, host - gpu)
            extra_f = excess * host_f / host if host > 0 else 0.0
            extra_b = excess - extra_f
        else:
            extra_f, extra_b = extra(host_f, gpu_f), extra(host_b, gpu_b)
    return {"host_fwd_s": host_f, "host_bwd_s": host_b, "host_fwd_extra_s": extra_f,
            "host_bwd_extra_s": extra_b, "host_update_s": extra(entry["per_iteration_s"], update_s + backlog)}


def issues_ahead(plan: StagePlan) -> bool:
    """Whether the stage's host issues its whole schedule ahead of its GPU (a pipeline stage of
    :data:`~trainsim.operators.stages.ISSUE_AHEAD_PIPELINES`, whose runtimes exist only with pp > 1):
    the simulation then runs its host clock (sim/processes.py), and :func:`host_fields`' per-step
    extras are Eq. 7's slots only."""
    return plan.runtime in ISSUE_AHEAD_PIPELINES
