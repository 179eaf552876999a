"""Experiment (not shipped): FSDP2's micro-batch as three machines, the host that runs its hooks, the
communicator that runs its all-gathers and reduce-scatters, and the GPU's compute stream.

The simulation prices an FSDP2 micro-batch as its compute, plus the collectives its prefetching does
not hide and the copies around them (``sim.exposed.fsdp_exposed``), plus the host's excess over the
compute alone (``sim.host_time.host_fields``). Where the host and the collectives are both near the
compute, that adds two waits that overlap: a GPU waiting for an all-gather is not also waiting for the
host. This module replaces both with one flow shop. Integrated into ``sim/costs.py`` for FSDP2 without
a pipeline (``fsdp_flow_shop_integration.diff`` beside this file, against commit d5ecb82: copy this
file to ``sim/fsdp_shop.py`` there and ``git apply`` the diff), it moved every FSDP2 table the other
way, so it is not shipped:

* every Hugging Face table (H100 and H200): fsdp2 MAPE 7.51 -> 8.50 % (mean +1.9 -> -6.5 %), fsdp4
  7.12 -> 8.78 % (+3.8 -> -8.2 %);
* the 13 GPU-bound H200 tables: fsdp2 3.66 -> 5.09 %, fsdp4 2.34 -> 3.78 % (both under);
* the H100 tables alone: fsdp2 12.87 -> 13.68 % (+9.2 -> -8.2 %), fsdp4 10.89 -> 11.56 % (+10.1 -> -10.2 %);
* machine BS (validation/fsdp_mid_h200_2gpu_machineBS/): fsdp2 d2048-L8, d3072-L8, d1536-L12
  +3.7, +4.6, -12.4 % -> -10.6, -19.0, -19.7 %;
* machine BT's micro-batch sweep (validation/fsdp_sweep_h200_2gpu_machineBT/): d3072-L8 b1, b2, b4,
  b8 +32.3, +10.6, -7.0, -6.1 % -> -5.8, -14.3, -8.5, -7.0 %;
* the held-out unseen6 shapes on machines BU, BV and BW: fsdp2 14.8 -> 8.0 %, 8.9 -> 11.8 % and 12.2 ->
  6.5 %. Over all 71 fsdp2 rows measured, 9.4 -> 9.0 %; over the 29 of the five fresh machines 12.2 -> 9.7 %.

So the sum over-predicts the mid-sized rows and the shop under-predicts them by as much. BS's kernel
timelines say what neither has: the all-gathers and reduce-scatters take their priced time at best
(d3072-L8: 0.82 ms against 1.04 ms priced with the copy-in) but 1.5-10x that at the median on one of
the two ranks, waiting inside NCCL for the other rank, whose host is behind (docs/multi_gpu.md, "FSDP2
as a flow shop"). Giving the shop the measured slowest-rank lag (x1.088 for two ranks) moved it by
less than a point.

    python validation/experiments/fsdp_flow_shop.py   # the hand-checked two-layer case

What is modelled (torch 2.11-2.13 ``torch.distributed.fsdp._fully_shard``):

* The host never waits for the GPU inside a micro-batch (FSDP2 synchronises streams with events,
  not the CPU); it waits once at the micro-batch's start (Hugging Face's causal mask), so the
  micro-batch starts with the host, the communicator and the GPU idle at time 0.
* Forward: the root unit's pre-forward issues its all-gather at 0; layer ``i``'s pre-forward hook
  issues its all-gather when the host reaches the layer (``i`` layer-forwards of host time), and
  the GPU copies it out (compute stream) before the layer's compute. The all-gather streams wait
  for the copy-out of the all-gather two before (``wait_for_unshard``'s saved state), so at most two
  gathers run ahead of the compute. The layer's last operator is issued when the host leaves it.
* Backward: layer ``i``'s pre-backward hook copies its gathered parameters out and prefetches layer
  ``i - 1``'s all-gather (the first hook also gathers its own; a gather waits for the event
  recorded when the forward freed the layer's parameters); its post-backward hook, when the
  host leaves the layer, copies the gradients into the reduce-scatter's input on the compute
  stream (``_chunk_cat``) after the compute stream waited for the previous reduce-scatter (one
  input buffer in flight), then reduce-scatters. The root's reduce-scatter comes last, and the
  micro-batch ends when the compute stream has waited for it (the final callback).
* One communicator: all-gathers and reduce-scatters run one at a time, in the order the host
  issued them (NCCL orders a communicator's operations).
* Compute and collectives that run at once slow each other by the measured interference factors
  (compute at ``1/f`` of its speed, the collective at ``1/g``); the copies are not slowed.

What is not: the hooks' share of the host time (spread evenly over the layers), the host's own
jitter, the caching allocator. Integrated, the result fed :class:`sim.costs.StageCost`'s fields: the
GPU's idle time while the host has not issued what it would run next as the host's excess, its idle
time while a collective it needs is not done, the copies and the interference as FSDP2's.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

GPU, COMM = 0, 1
# what an operation is: compute (slowed beside a collective), a copy, a wait (no work), a collective
COMPUTE, COPY, WAIT, COLLECTIVE = "compute", "copy", "wait", "collective"


@dataclass(frozen=True)
class ShopTimes:
    """Seconds of one FSDP2 micro-batch (forward: from its start until the forward's last GPU
    operation ends; backward: from then until the compute stream has waited for the last
    reduce-scatter)."""

    forward_s: float
    backward_s: float
    host_idle_fwd_s: float  # the GPU idle because the host has not issued its next operation
    host_idle_bwd_s: float
    comm_idle_fwd_s: float  # the GPU idle waiting for a collective
    comm_idle_bwd_s: float
    copies_fwd_s: float
    copies_bwd_s: float
    slowdown_fwd_s: float  # what the collectives beside the compute added to it
    slowdown_bwd_s: float
    host_end_s: float  # when the host has issued the backward's last operation

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class FSDPStep:
    """One stage's FSDP2 micro-batch, in seconds. Layers are taken as equal."""

    layers: int
    head_fwd: float  # GPU compute before the layers (the embedding), forward
    layer_fwd: float
    tail_fwd: float  # after the layers (final norm, LM head, loss)
    tail_bwd: float
    layer_bwd: float  # a layer's backward, its recompute included
    head_bwd: float
    host_layer_fwd: float  # host time of one layer's forward, hooks included
    host_layer_bwd: float
    ag_layer: float  # a layer's all-gather, its copy-in included
    rs_layer: float
    ag_root: float
    rs_root: float
    copy_out_layer: float  # on the compute stream
    cat_layer: float  # the reduce-scatter's copy-in, on the compute stream
    copy_out_root: float
    cat_root: float
    f_fwd: float = 1.0  # compute's slowdown beside a collective, forward and backward
    f_bwd: float = 1.0
    g: float = 1.0  # a collective's slowdown beside compute


@dataclass
class _Op:
    stream: int
    work: float
    release: float  # the host issues it then
    deps: tuple[int, ...] = ()
    kind: str = COMPUTE
    backward: bool = False
    min_end: float = 0.0  # it cannot end before (the host issues its last kernel then)
    slow: float = 1.0  # compute's factor beside a collective


def _ops(s: FSDPStep) -> tuple[list[_Op], float]:
    """The micro-batch's operations in issue order, and when the host has issued the last one."""
    n = s.layers
    ops: list[_Op] = []

    def add(op: _Op) -> int:
        ops.append(op)
        return len(ops) - 1

    # forward: the root's gather and copy-out, the embedding, then each layer
    ag = [add(_Op(COMM, s.ag_root, 0.0, kind=COLLECTIVE))]
    outs = [add(_Op(GPU, s.copy_out_root, 0.0, (ag[0],), COPY))]
    add(_Op(GPU, s.head_fwd, 0.0, slow=s.f_fwd))
    t = 0.0
    resharded = []  # each layer's forward: its parameters are freed after it, and a later gather waits
    for _ in range(n):
        ag.append(add(_Op(COMM, s.ag_layer, t, (outs[-2],) if len(outs) >= 2 else (), COLLECTIVE)))
        outs.append(add(_Op(GPU, s.copy_out_layer, t, (ag[-1],), COPY)))
        resharded.append(add(_Op(GPU, s.layer_fwd, t, min_end=t + s.host_layer_fwd, slow=s.f_fwd)))
        t += s.host_layer_fwd
    add(_Op(GPU, s.tail_fwd, t, slow=s.f_fwd))
    forward_ops = len(ops)
    # backward: the tail's (the root stays gathered), then each layer in reverse
    add(_Op(GPU, s.tail_bwd, t, slow=s.f_bwd))
    gathers: dict[int, int] = {}
    rs_prev: int | None = None
    if n:
        gathers[n - 1] = add(_Op(COMM, s.ag_layer, t, (resharded[n - 1],), COLLECTIVE))
    for i in reversed(range(n)):
        out = add(_Op(GPU, s.copy_out_layer, t, (gathers[i],), COPY))
        if i > 0:  # the prefetch waits for this copy-out (the gather streams wait on its event)
            gathers[i - 1] = add(_Op(COMM, s.ag_layer, t, (out, resharded[i - 1]), COLLECTIVE))
        add(_Op(GPU, s.layer_bwd, t, min_end=t + s.host_layer_bwd, slow=s.f_bwd))
        t += s.host_layer_bwd
        cat = add(_Op(GPU, s.cat_layer, t, (rs_prev,) if rs_prev is not None else (), COPY))
        rs_prev = add(_Op(COMM, s.rs_layer, t, (cat,), COLLECTIVE))
    add(_Op(GPU, s.head_bwd, t, slow=s.f_bwd))
    cat = add(_Op(GPU, s.cat_root, t, (rs_prev,) if rs_prev is not None else (), COPY))
    rs_root = add(_Op(COMM, s.rs_root, t, (cat,), COLLECTIVE))
    add(_Op(GPU, 0.0, t, (rs_root,), WAIT))
    for op in ops[forward_ops:]:
        op.backward = True
    return ops, t


def run_shop(s: FSDPStep) -> ShopTimes:
    """Run one micro-batch of ``s`` (:class:`ShopTimes`): the two streams advance together, each
    operation starting once the host has issued it, the operations it waits for are done and its
    stream is free; a compute operation and a collective that run at once progress at ``1/f`` and
    ``1/g`` of their speeds."""
    ops, host_end = _ops(s)
    queues = [[i for i, op in enumerate(ops) if op.stream == st] for st in (GPU, COMM)]
    head = [0, 0]
    left = [op.work for op in ops]
    done = [math.inf] * len(ops)
    t = 0.0
    idle = {(k, b): 0.0 for k in ("host", "comm") for b in (False, True)}
    slowed = {False: 0.0, True: 0.0}
    forward_end = 0.0
    eps = 1e-15
    while head[GPU] < len(queues[GPU]) or head[COMM] < len(queues[COMM]):
        cur = [queues[st][head[st]] if head[st] < len(queues[st]) else None for st in (GPU, COMM)]
        ready = [c is not None and ops[c].release <= t + eps and all(done[d] <= t + eps for d in ops[c].deps)
                 for c in cur]
        working = [ready[st] and left[c] > eps if c is not None else False for st, c in enumerate(cur)]
        g_idx = cur[GPU]
        gop = ops[g_idx] if g_idx is not None else None
        computing = working[GPU] and gop is not None and gop.kind == COMPUTE
        rate = [1.0, 1.0]
        if computing and working[COMM]:
            assert gop is not None
            rate = [1.0 / gop.slow, 1.0 / s.g]
        nxt = math.inf
        for st in (GPU, COMM):
            c = cur[st]
            if c is None:
                continue
            op = ops[c]
            if working[st]:
                nxt = min(nxt, t + left[c] / rate[st])
            elif ready[st]:  # its work is done; it ends when the host has issued its last kernel
                nxt = min(nxt, max(t, op.min_end))
            elif op.release > t + eps:
                nxt = min(nxt, op.release)
        if not math.isfinite(nxt):  # waiting on each other: impossible for the order _ops builds
            raise RuntimeError("FSDP2 flow shop deadlocked")
        dt = nxt - t
        if gop is not None and not ready[GPU] and dt > 0:
            why = "host" if gop.release > t + eps else "comm"
            idle[why, gop.backward] += dt
        elif gop is not None and ready[GPU] and not working[GPU] and dt > 0:
            idle["host", gop.backward] += dt  # its last kernel is not issued yet
        for st in (GPU, COMM):
            c = cur[st]
            if c is not None and working[st]:
                left[c] -= dt * rate[st]
                if st == GPU and rate[GPU] < 1.0:
                    slowed[ops[c].backward] += dt * (1.0 - rate[GPU])
        t = nxt
        for st in (GPU, COMM):
            c = cur[st]
            finished = c is not None and left[c] <= eps * max(1.0, ops[c].work) + eps
            if c is not None and ready[st] and finished and t >= ops[c].min_end - eps:
                left[c] = 0.0
                done[c] = t
                head[st] += 1
                if st == GPU and not ops[c].backward:
                    forward_end = t
    copies = {b: sum(op.work for op in ops if op.stream == GPU and op.kind == COPY and op.backward == b)
              for b in (False, True)}
    return ShopTimes(forward_s=forward_end, backward_s=t - forward_end,
                     host_idle_fwd_s=idle["host", False], host_idle_bwd_s=idle["host", True],
                     comm_idle_fwd_s=idle["comm", False], comm_idle_bwd_s=idle["comm", True],
                     copies_fwd_s=copies[False], copies_bwd_s=copies[True],
                     slowdown_fwd_s=slowed[False], slowdown_bwd_s=slowed[True], host_end_s=host_end)


def main() -> int:
    """Two layers, the host issuing at once, no copies: forward 10 s (the root's gather 0-1 s, layer 0's
    1-4 s, layer 1's after the root's copy-out 4-7 s; the GPU idles 2-4 s and 6-7 s), backward 12 s
    (layer 1's gather waits for its forward to end at 9 s; the root's reduce-scatter 21-22 s is waited
    for), as worked by hand."""
    step = FSDPStep(layers=2, head_fwd=1, layer_fwd=2, tail_fwd=1, tail_bwd=2, layer_bwd=4, head_bwd=1,
                    host_layer_fwd=0, host_layer_bwd=0, ag_layer=3, rs_layer=1, ag_root=1, rs_root=1,
                    copy_out_layer=0, cat_layer=0, copy_out_root=0, cat_root=0)
    times = run_shop(step)
    print(times)
    assert (times.forward_s, times.backward_s, times.comm_idle_fwd_s, times.comm_idle_bwd_s) == (10, 12, 4, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
