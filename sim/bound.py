"""A closed-form lower bound on the simulated iteration time (the sweep's pruning bound).

Only what every stage replica's own timeline must do in sequence is counted, each piece at its
nominal duration, and no waiting beyond what the pipeline's data dependencies force: no exposed
DP all-reduce or all-gather, no contention, no bubble beyond the fill and drain of one micro-batch.
With ``F_s`` and ``B_s`` stage ``s``'s forward and backward slots as Eq. 7 charges them
(:attr:`sim.costs.StageCost.fwd_s`: compute, MP syncs, exposed CP and FSDP communication, the
host's excess, the P2P send), ``m`` micro-batches, ``v`` model chunks per stage (interleaved 1F1B;
else 1), ``R_s`` the gradient buckets of stage ``s`` that become ready only at the end of its last
backward (all of them, unless ``overlap_dp`` or the costs' ready fractions release some earlier)
and ``U_s`` its optimizer step (with the gradient accumulation, the host's per-update time and,
when gradients are reduced over more than one rank, the ZeRO-1 parameter all-gather)::

    done_s = sum_{j<s} F_j / v  +  m (F_s + B_s)  +  max( sum_{j<s} B_j / v,  R_s - P_s / v )
    bound  = max_s done_s  +  max_s U_s

Why a deterministic simulation (:mod:`sim.engine`, realistic or ideal, any schedule of
:mod:`sim.schedule`, no perturbation: jitter can shorten a step) never finishes earlier:

* a transfer never runs faster than alone: a flow's share of its nominal speed is in (0, 1]
  (:mod:`sim.network`), and without contention it is a plain delay of its nominal time;
* a stage whose host issues its schedule ahead (``host_ahead``) has no host excess in its steps,
  which are at least their GPU work; its last step cannot end before its host has issued all
  ``m * v`` of them, ``m (H^f_s + H^b_s)`` after the start (the host's seconds per micro-batch);
* a stage replica runs its ``m * v`` forward and ``m * v`` backward steps one after another. In
  the realistic mode a step is its compute, MP all-reduce, CP ring, FSDP gathers and host time,
  each at least its nominal ``/ v`` share, then a blocking P2P send of at least the full ``p2p_s``
  (``>= p2p_s / v``); in the ideal mode every slot is ``max_s F_s / v`` or ``max_s B_s / v``. So
  the steps take at least ``m (F_s + B_s)``;
* its first step is a forward that needs its input, sent by the forward of the previous virtual
  stage after its own step, which needs its input ...: at least ``sum_{j<s} F_j / v`` passes first;
* its last step is a backward of virtual stage ``c * pp + s``, whose output the backwards of
  virtual stages ``c * pp + s - 1, ..., c * pp`` (stages ``s - 1, ..., 0``) need in turn: at least
  ``sum_{j<s} B_j / v`` passes after it before the pipeline has drained;
* the buckets released at the end of that last backward's compute (before its P2P send ``P_s``,
  the stage's ``p2p_bwd_s``, of which the slot counts at least ``P_s / v``) run after it, one
  after another, each for at least its nominal time (interference only slows them); the ideal
  mode runs the whole all-reduce ``dp_allreduce_s`` after the slot, at least as long;
* no stage starts its optimizer step before every stage has drained and reduced its gradients
  (the global gradient-norm barrier); then the step, and the stage's all-gather (realistic: a
  collective after the step; ideal: inside ``update_s``).

The pieces of a stage's term are disjoint in time. The sum is scaled by ``1 - 1e-9`` so that
float rounding (``m * v`` steps of ``F / v`` against ``m * F``; a flow's remaining work updated at
each re-share) cannot put it above an exact tie.
"""

from __future__ import annotations

from trainsim.sim.costs import IterationCosts, StageCost

#: relative slack for float rounding (see module doc)
ROUNDING = 1e-9


def lower_bound(costs: IterationCosts, overlap_dp: bool = True) -> float:
    """Seconds that a deterministic simulation of ``costs`` can never beat (module doc).

    ``overlap_dp``: the run's overlap_grad_reduce (buckets released during the last backward). The
    default, True, counts only the last bucket after the backward, which bounds either run; pass
    False for a run without the overlap (its whole all-reduce follows the backward: a tighter bound).
    """
    stages = costs.stages
    v = max(1, costs.parallelism.virtual_stages)
    m = costs.micro_batches
    gathers = costs.parallelism.grad_ranks > 1
    fwd_head = bwd_tail = 0.0
    drained = 0.0
    for st in stages:
        f, b = st.fwd_s, st.bwd_s
        if st.host_ahead:  # its steps are their GPU work, and its host clock ends after all its issue
            f, b = f - st.host_fwd_extra_s, b - st.host_bwd_extra_s
        own = fwd_head + m * (f + b)
        if st.host_ahead:
            own = max(own, m * (st.host_fwd_s + st.host_bwd_s))
        # the buckets start when the last backward's compute ends, before its P2P send
        drained = max(drained, own + bwd_tail, own - st.p2p_bwd_s / v + _last_buckets(st, overlap_dp))
        fwd_head += f / v
        bwd_tail += b / v
    update = max(st.optimizer_s + st.grad_accum_s + st.host_update_s + (st.dp_allgather_s if gathers else 0.0)
                 for st in stages)
    return (drained + update) * (1.0 - ROUNDING)


def _last_buckets(st: StageCost, overlap_dp: bool) -> float:
    """Seconds of the buckets that become ready only when the stage's last backward ends (as
    :func:`sim.processes._releases` releases them)."""
    buckets = st.dp_bucket_s
    if not buckets:
        return 0.0
    ready = st.dp_bucket_ready
    slow = min(1.0, st.interference_dp)  # a factor above 1 only slows an overlapped bucket
    if ready:
        return slow * sum(t for t, f in zip(buckets, ready, strict=False) if f >= 1.0)
    return slow * (buckets[-1] if overlap_dp else sum(buckets))
