"""Compute-communication interference: kernels and NCCL collectives running at once on each GPU.

One process per GPU under torchrun (NCCL), or several CPU processes (gloo, for tests)::

    env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python -m torch.distributed.run --standalone --nproc-per-node 4 \\
        -m trainsim.calibration.interference_bench --out samples/h100-interference

(:func:`launch_command` builds that line.) NVLink multicast stays off, exactly as in
:mod:`calibration.collectives_bench`: :func:`ensure_multicast_off` runs before the process
group exists and refuses an override.

What is measured, per (compute kernel, collective, message size)
----------------------------------------------------------------
* compute kernels (bf16, random inputs): GEMMs of transformer layers (``--gemms MxKxN``,
  ``A[M,K] @ B[K,N]`` into a preallocated output), causal flash SDPA forward + backward
  (``--attention BxHxLxD``; backward through ``torch.autograd.grad``, so nothing accumulates),
  and one memory-bound kernel, ``torch.add`` of two ``--memory-mib`` MiB tensors into a third;
* collectives over the whole world: all_reduce (``coll_bytes`` = buffer), all_gather_into_tensor
  and reduce_scatter_tensor (``coll_bytes`` = the per-rank shard, as ``operators.ops.Collective``
  counts it), and ``p2p``: a bidirectional ``batch_isend_irecv`` exchange between ranks 2i and
  2i+1 (``coll_bytes`` per direction), the shape of a 1F1B send-forward/receive-backward or a
  CP ring step. Every rank runs the same load, as DDP/TP/CP ranks do;
* three figures: the compute loop alone, the collective loop alone, and both at once.

How the overlap is timed (CUDA)
-------------------------------
1. A spin kernel (``torch.cuda._sleep``) on the default stream holds the GPU while the CPU
   queues everything; a ``gate`` event after it starts both loops at the same instant, so the
   measurement never depends on the CPU launching fast enough. (If the gate has already opened
   when the CPU finishes queueing, the run is repeated with a longer spin, on every rank.)
2. On a side stream that waits on the gate, ``n`` collectives are launched back to back with
   ``async_op=True`` (NCCL runs them on its own stream); after each, ``work.wait()`` makes the
   side stream wait for it and an event is recorded there: the event fires when that
   collective completes. On the default stream, after the gate, a start event, ``K`` compute
   calls, a stop event.
3. compute per call = (stop - start) / K. Collective per call = the mean interval between
   successive collective completions that fall inside the compute window [start, stop]:
   back-to-back calls on one stream complete one per call duration, so this is the call time
   while compute is running, free of the first call's start-up and of whatever runs after the
   window. ``n`` is sized (from an untimed pilot) so the collectives outlast the compute
   (``--coverage`` 1.5 times the window) and ``K`` so the window is ``--window-ms`` long and
   holds at least six collective calls. ``coverage`` = share of the window during which
   collectives were still in flight (should be 1; the fit drops rows below 0.95).
4. Alone figures use the same machinery: the compute loop with no collective; the collective
   loop with no compute (the same completion-interval estimator, so both collective figures
   are back-to-back throughput per call, not the barrier-per-call latency of
   collectives_bench).

Each repeat runs compute alone, collective alone and the overlap in turn (so drift hits all
three), after ``--warmup`` untimed overlap runs. Each figure of a repeat is the slowest
rank's (an all_reduce MAX of the per-rank values after the run, outside the timed region);
the row holds the median over ``--repeats``. On the CPU (gloo) the collective loop runs in a
thread beside the compute loop and ``time.perf_counter`` replaces events: that checks the
plumbing only.

Output ``--out DIR``: ``interference.csv`` (columns :data:`calibration.interference.COLUMNS`,
times in microseconds per call, slowdowns = overlap / alone) and ``meta.json`` (GPU, torch,
NCCL, SM count, NCCL channel / connection environment, protocol). Rank 0 appends and flushes
one row per key, so an interrupted run resumes: keys already in the CSV are skipped.
``--time-budget S`` stops starting keys once the next would end after S seconds.
torch is imported lazily, as in :mod:`calibration.harness`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainsim.calibration.collectives_bench import (
    MULTICAST_OFF,
    ensure_multicast_off,
    exit_skipping_teardown,
    torchrun_world,
)
from trainsim.calibration.harness import TorchUnavailable
from trainsim.calibration.interference import (
    COLLECTIVES,
    COLUMNS,
    CSV_FILE,
    KINDS,
    fit_interference,
    format_row,
    read_rows,
)
from trainsim.operators.errors import ConfigError

META_FILE = "meta.json"
MODULE = "trainsim.calibration.interference_bench"
MIB = 2**20

#: transformer-layer shapes on a GPU; the CPU defaults are tiny (the run checks plumbing only)
GPU_DEFAULTS = {"gemms": "8192x2048x6144,8192x2048x8192,8192x8192x2048,4096x4096x4096,16384x5120x5120",
                "attention": "4x16x2048x128", "memory_mib": "256", "sizes": f"{4 * MIB},{32 * MIB},{256 * MIB}"}
CPU_DEFAULTS = {"gemms": "64x64x64", "attention": "1x2x32x16", "memory_mib": "1", "sizes": "4096,65536"}
#: NCCL's SM footprint is its channel count (one CTA per channel); these variables set it, and
#: CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting) serialises the hardware queues of streams
FOOTPRINT_ENV = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_ALGO",
                 "NCCL_PROTO", "NCCL_NCHANNELS_PER_NET_PEER", "CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_NCCL_HIGH_PRIORITY",
                 "NCCL_DEBUG")
#: launches queued behind the gate per loop: CUDA blocks the CPU once ~1,000 launches are pending,
#: which would open the gate before the compute loop is queued
MAX_COLL_CALLS = 200
MAX_COMPUTE_CALLS = 150


def launch_command(nproc: int, out: str, extra_args: Sequence[str] = (), python: str | None = None) -> list[str]:
    """The torchrun line for ``nproc`` processes on this host, the multicast-off variables on it."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 2:
        raise ConfigError("--nproc-per-node", f"interference needs at least 2 processes, got {nproc!r}")
    return ["env", *(f"{k}={v}" for k, v in MULTICAST_OFF.items()),
            python or sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", MODULE, "--out", str(out), *extra_args]


# ---------------------------------------------------------------- arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="directory to create or resume")
    p.add_argument("--computes", default=",".join(KINDS), help=f"comma-separated of {', '.join(KINDS)}")
    p.add_argument("--gemms", default=None, metavar="MxKxN,...",
                   help=f"GEMM shapes (default on a GPU: {GPU_DEFAULTS['gemms']})")
    p.add_argument("--attention", default=None, metavar="BxHxLxD,...",
                   help=f"causal SDPA fwd+bwd shapes (default on a GPU: {GPU_DEFAULTS['attention']})")
    p.add_argument("--memory-mib", default=None, metavar="MIB,...",
                   help="elementwise-add tensor sizes in MiB (default on a GPU: 256)")
    p.add_argument("--collectives", default="all", help=f"comma-separated of {', '.join(COLLECTIVES)} (default all)")
    p.add_argument("--sizes", default=None, metavar="BYTES,...",
                   help="collective message sizes in bytes (default on a GPU: 4 MiB, 32 MiB, 256 MiB)")
    p.add_argument("--window-ms", type=float, default=20.0, help="compute loop length to aim for (default 20 ms)")
    p.add_argument("--coverage", type=float, default=1.5,
                   help="collective loop length over the compute window (default 1.5)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per key; the median is kept (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed overlap runs per key (default 1)")
    p.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl when CUDA is available, else gloo on the CPU")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="start no key that would end after S seconds (resume later)")
    p.add_argument("--mem-fraction", type=float, default=0.6,
                   help="skip keys whose buffers need more than this share of free GPU memory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-q", "--quiet", action="store_true", help="no per-key progress lines (errors still print)")


def _shapes(text: str, field: str, dims: int) -> list[tuple[int, ...]]:
    out = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        try:
            shape = tuple(int(v) for v in part.lower().split("x"))
        except ValueError:
            raise ConfigError(field, f"expected {'x'.join('N' * dims)} shapes, got {part!r}") from None
        if len(shape) != dims or min(shape) < 1:
            raise ConfigError(field, f"expected {dims} positive sizes joined by 'x', got {part!r}")
        out.append(shape)
    if not out:
        raise ConfigError(field, "no shapes given")
    return out


def _names(text: str, field: str, known: Sequence[str]) -> list[str]:
    vals = list(known) if text.strip() == "all" else [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in vals if v not in known]
    if bad or not vals:
        raise ConfigError(field, f"unknown {', '.join(bad) or 'empty list'}; known: {', '.join(known)}")
    return vals


def _check_numbers(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise ConfigError("--repeats", f"must be >= 1, got {args.repeats}")
    if args.warmup < 0:
        raise ConfigError("--warmup", f"must be >= 0, got {args.warmup}")
    if not (args.window_ms > 0 and math.isfinite(args.window_ms)):
        raise ConfigError("--window-ms", f"must be positive, got {args.window_ms}")
    if not (args.coverage >= 1.1 and math.isfinite(args.coverage)):
        raise ConfigError("--coverage", f"must be >= 1.1 (collectives must outlast the compute), got {args.coverage}")
    if args.time_budget is not None and not args.time_budget > 0:
        raise ConfigError("--time-budget", f"must be positive, got {args.time_budget}")


@dataclass(frozen=True)
class Key:
    compute: str  # class: gemm / attention / memory
    shape: tuple[int, ...]
    collective: str
    coll_bytes: int

    @property
    def shape_text(self) -> str:
        return f"{self.shape[0]}MiB" if self.compute == "memory" else "x".join(map(str, self.shape))

    @property
    def flops(self) -> int:
        if self.compute == "gemm":
            m, k, n = self.shape
            return 2 * m * k * n
        if self.compute == "attention":  # causal: fwd 2*b*h*l^2*d, bwd 2.5x that (FlashAttention-2 count)
            b, h, l, d = self.shape
            return 7 * b * h * l * l * d
        return self.shape[0] * MIB // 2  # one add per 2-byte element

    @property
    def row_id(self) -> tuple[str, str, str, int]:
        return (self.compute, self.shape_text, self.collective, self.coll_bytes)


def plan_keys(computes: dict[str, list[tuple[int, ...]]], collectives: Sequence[str], sizes: Sequence[int],
              done: set[tuple[str, str, str, int]]) -> list[Key]:
    """Everything still to measure, in a fixed order (every rank walks the same list)."""
    keys = [Key(kind, shape, coll, nbytes) for kind in KINDS for shape in computes.get(kind, [])
            for coll in collectives for nbytes in sizes]
    return [k for k in keys if k.row_id not in done]


# ---------------------------------------------------------------- kernels and collectives


def _compute_fn(torch, key: Key, device, dtype, gen) -> tuple[Callable[[], Any], int]:
    """(one call of the kernel, bytes it holds) with inputs allocated once."""
    def rnd(*shape, grad: bool = False):
        t = torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
        return t.requires_grad_(grad)

    if key.compute == "gemm":
        m, k, n = key.shape
        a, b, c = rnd(m, k), rnd(k, n), torch.empty(m, n, device=device, dtype=dtype)
        return (lambda: torch.matmul(a, b, out=c)), (m * k + k * n + m * n) * a.element_size()
    if key.compute == "attention":
        import torch.nn.functional as F

        bsz, h, l, d = key.shape
        q, k_, v = (rnd(bsz, h, l, d, grad=True) for _ in range(3))
        g = rnd(bsz, h, l, d)
        ctx: Callable[[], Any]
        if device.type == "cuda":  # flash only: a silent fallback to another kernel would change the class
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def ctx():
                return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        else:
            import contextlib

            ctx = contextlib.nullcontext

        def attn():
            with ctx():
                o = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
                return torch.autograd.grad(o, (q, k_, v), g)

        return attn, 12 * bsz * h * l * d * q.element_size()  # q k v g o and three gradients, roughly
    n = key.shape[0] * MIB // torch.tensor([], dtype=dtype).element_size()
    x, y, z = rnd(n), rnd(n), torch.empty(n, device=device, dtype=dtype)
    return (lambda: torch.add(x, y, out=z)), 3 * n * x.element_size()


def _coll_fn(torch, dist, key: Key, device, dtype, gen, world: int, rank: int) -> tuple[Callable[[], None], int]:
    """(one collective call, bytes it holds). The call launches ``async_op=True`` and waits on the
    work: on NCCL that makes the *current stream* wait (no CPU block), so an event recorded next
    on that stream marks the collective's completion; on gloo it blocks the calling thread."""
    elem = torch.tensor([], dtype=dtype).element_size()
    n = max(1, key.coll_bytes // elem)

    def rnd(count: int):
        return torch.randn(count, generator=gen, device=device, dtype=torch.float32).to(dtype)

    def waiting(launch: Callable[[], Any]) -> Callable[[], None]:
        def call() -> None:
            works = launch()
            for w in works if isinstance(works, list) else [works]:
                w.wait()
        return call

    if key.collective == "all_reduce":
        buf = rnd(n)
        return waiting(lambda: dist.all_reduce(buf, async_op=True)), n * elem
    # torch 2.13 renames all_gather_into_tensor / reduce_scatter_tensor (same arguments); the GPU hosts run 2.11
    if key.collective == "all_gather":
        shard, full = rnd(n), torch.empty(n * world, device=device, dtype=dtype)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return waiting(lambda: gather(full, shard, async_op=True)), n * (world + 1) * elem
    if key.collective == "reduce_scatter":
        full, shard = rnd(n * world), torch.empty(n, device=device, dtype=dtype)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return waiting(lambda: scatter(shard, full, async_op=True)), n * (world + 1) * elem
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    out_buf, in_buf = rnd(n), torch.empty(n, device=device, dtype=dtype)
    ops = [dist.P2POp(dist.isend, out_buf, peer), dist.P2POp(dist.irecv, in_buf, peer)]
    return waiting(lambda: dist.batch_isend_irecv(ops)), 2 * n * elem


# ---------------------------------------------------------------- timing


@dataclass(frozen=True)
class Loop:
    """One run of the loops: compute window (ms), collective completion times from its start (ms)."""

    window_ms: float
    compute_calls: int
    completions_ms: tuple[float, ...]
    starved: bool = False  # the gate opened before everything was queued (CUDA only)

    @property
    def compute_us(self) -> float:
        return self.window_ms * 1000.0 / self.compute_calls

    def coll_us(self, within_window: bool) -> tuple[float | None, int]:
        """Mean interval between successive completions (inside the window when asked), and their count."""
        t = [x for x in self.completions_ms if 0.0 < x <= self.window_ms] if within_window \
            else list(self.completions_ms)
        if len(t) < 2:
            return None, len(t)
        return (t[-1] - t[0]) * 1000.0 / (len(t) - 1), len(t)

    @property
    def coverage(self) -> float:
        if not self.completions_ms or self.window_ms <= 0:
            return 0.0
        return min(1.0, self.completions_ms[-1] / self.window_ms)


class _CudaClock:
    """CUDA events; both loops released together by a gate after a spin kernel (module docstring)."""

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.comm = torch.cuda.Stream(device)
        # spin-kernel cycles per ms, measured once (the SM clock differs between GPUs and boosts)
        ev0, ev1 = self._event(), self._event()
        torch.cuda._sleep(1000)
        ev0.record()
        torch.cuda._sleep(2_000_000)
        ev1.record()
        ev1.synchronize()
        self.cycles_per_ms = 2_000_000 / max(ev0.elapsed_time(ev1), 1e-3)

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def compute_alone(self, fn: Callable[[], Any], calls: int, spin_ms: float = 0.0) -> tuple[float, float]:
        """(GPU ms for ``calls`` calls, CPU seconds spent queueing them).

        With ``spin_ms`` the calls are queued behind a spin kernel, as in :meth:`loops`, so a
        kernel faster than its launch is timed on the GPU, not at the CPU's launch rate.
        """
        self.sync()
        if spin_ms > 0:
            self.torch.cuda._sleep(max(1, int(spin_ms * self.cycles_per_ms)))
        s, e = self._event(), self._event()
        s.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        cpu = time.perf_counter() - t0
        e.record()
        e.synchronize()
        return s.elapsed_time(e), cpu

    def loops(self, fn: Callable[[], Any] | None, calls: int, coll: Callable[[], None], n: int,
              spin_ms: float) -> tuple[Loop, float]:
        """Collective loop (and the compute loop when ``fn``) released by one gate; (loop, CPU s queueing)."""
        torch = self.torch
        self.sync()
        torch.cuda._sleep(max(1, int(spin_ms * self.cycles_per_ms)))
        gate = torch.cuda.Event()
        gate.record()
        start = self._event()
        start.record()
        t0 = time.perf_counter()
        ends = []
        with torch.cuda.stream(self.comm):
            self.comm.wait_event(gate)
            for _ in range(n):
                coll()
                ev = self._event()
                ev.record(self.comm)
                ends.append(ev)
        for _ in range(calls if fn is not None else 0):
            fn()  # type: ignore[misc]
        stop = self._event()
        stop.record()
        cpu = time.perf_counter() - t0
        starved = gate.query()  # already open: the GPU may have idled waiting for the CPU
        self.sync()
        window = start.elapsed_time(stop) if fn is not None else 0.0
        return Loop(window, max(calls, 1), tuple(start.elapsed_time(e) for e in ends), starved), cpu


class _CpuClock:
    """Wall clock; the collective loop runs in a thread (gloo blocks the caller) beside the compute."""

    def sync(self) -> None:
        pass

    def compute_alone(self, fn: Callable[[], Any], calls: int, spin_ms: float = 0.0) -> tuple[float, float]:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        return dt * 1000.0, dt

    def loops(self, fn: Callable[[], Any] | None, calls: int, coll: Callable[[], None], n: int,
              spin_ms: float) -> tuple[Loop, float]:
        ends: list[float] = []
        go = threading.Event()
        errors: list[BaseException] = []

        def comm() -> None:
            go.wait()
            try:
                for _ in range(n):
                    coll()
                    ends.append(time.perf_counter())
            except BaseException as e:  # re-raised in the caller: a thread must not swallow it
                errors.append(e)

        th = threading.Thread(target=comm, daemon=True)
        th.start()
        t0 = time.perf_counter()
        go.set()
        for _ in range(calls if fn is not None else 0):
            fn()  # type: ignore[misc]
        window = (time.perf_counter() - t0) * 1000.0 if fn is not None else 0.0
        th.join()
        if errors:
            raise errors[0]
        return Loop(window, max(calls, 1), tuple((e - t0) * 1000.0 for e in ends)), 0.0


# ---------------------------------------------------------------- one key


@dataclass(frozen=True)
class Plan:
    compute_calls: int
    coll_calls: int  # overlap run
    coll_alone_calls: int
    spin_ms: float


def make_plan(compute_us: float, coll_us: float, window_ms: float, coverage: float,
              enqueue_compute_us: float = 0.0, enqueue_coll_us: float = 0.0) -> Plan:
    """Loop lengths from pilot per-call times (identical on every rank: the inputs are max-reduced).

    The window is ``window_ms`` but at least six collective calls long (five completion
    intervals), and short enough that the collectives covering it stay under
    :data:`MAX_COLL_CALLS`; the spin covers the CPU's
    queueing time with 50 % margin plus 2 ms.
    """
    compute_us, coll_us = max(compute_us, 1e-3), max(coll_us, 1e-3)
    window_us = max(window_ms * 1000.0, 6 * coll_us)
    window_us = min(window_us, (MAX_COLL_CALLS - 2) * coll_us / coverage)
    k = min(MAX_COMPUTE_CALLS, max(3, round(window_us / compute_us)))
    n = min(MAX_COLL_CALLS, max(4, math.ceil(coverage * k * compute_us / coll_us) + 2))
    n_alone = min(MAX_COLL_CALLS, max(4, math.ceil(0.5 * k * compute_us / coll_us)))
    spin = 2.0 + 1.5 * (k * enqueue_compute_us + n * enqueue_coll_us) / 1000.0
    return Plan(k, n, n_alone, spin)


class _Measurer:
    def __init__(self, torch, dist, device, clock, rank: int) -> None:
        self.torch, self.dist, self.device, self.clock, self.rank = torch, dist, device, clock, rank

    def reduce_max(self, values: Sequence[float]) -> list[float]:
        """Max over ranks (after the run, outside any timed region); every rank gets the result."""
        t = self.torch.tensor(list(values), dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return [float(x) for x in t.cpu()]

    def gated(self, fn, coll, plan: Plan) -> tuple[Loop, Plan]:
        """One gated run (overlap when ``fn``, else the collective alone), agreed on by every rank.

        A run starved on any rank (the gate opened before the CPU had queued everything) is redone
        by all: first with twice the spin; if that is not enough, CUDA is probably blocking the CPU
        on a full launch queue, so the loops are halved as well. The plan that worked is kept.
        """
        loop = None
        for attempt in range(4):
            n = plan.coll_calls if fn is not None else plan.coll_alone_calls
            loop, _ = self.clock.loops(fn, plan.compute_calls, coll, n, plan.spin_ms)
            if self.reduce_max([float(loop.starved)])[0] == 0.0:
                return loop, plan
            if attempt == 0:
                plan = Plan(plan.compute_calls, plan.coll_calls, plan.coll_alone_calls, 2 * plan.spin_ms)
            else:
                plan = Plan(max(3, plan.compute_calls // 2), max(4, plan.coll_calls // 2),
                            max(4, plan.coll_alone_calls // 2), plan.spin_ms)
        assert loop is not None
        return loop, plan  # still starved: flagged in the row

    def key(self, fn, coll, args) -> dict[str, Any]:
        clock = self.clock
        # pilot (also the warm-up of cuBLAS heuristics and NCCL's first use): per-call times
        fn()
        clock.sync()
        ms, cpu = clock.compute_alone(fn, 3)
        clock.loops(None, 0, coll, 2, 2.0)  # first use: lazy communicator set-up, buffer registration
        pilot_coll, cpu_coll = clock.loops(None, 0, coll, 4, 2.0)
        c_us = pilot_coll.coll_us(False)[0] or 1.0
        comp_us, coll_us, enq_comp, enq_coll = self.reduce_max([ms * 1000 / 3, c_us, cpu * 1e6 / 3,
                                                                 cpu_coll * 1e6 / 4])
        plan = make_plan(comp_us, coll_us, args.window_ms, args.coverage, enq_comp, enq_coll)
        for _ in range(args.warmup):
            _, plan = self.gated(fn, coll, plan)
        reps: list[list[float]] = []
        starved = 0.0
        for _ in range(args.repeats):
            alone_ms, _ = clock.compute_alone(fn, plan.compute_calls, plan.spin_ms)
            alone_us = alone_ms * 1000 / plan.compute_calls  # before gated() may shorten the plan
            coll_loop, plan = self.gated(None, coll, plan)
            ov, plan = self.gated(fn, coll, plan)
            c_ov, inside = ov.coll_us(True)
            # max over ranks: slowest rank's times, fewest completions and least coverage (negated)
            reps.append(self.reduce_max([alone_us, coll_loop.coll_us(False)[0] or math.inf,
                                         ov.compute_us, math.inf if c_ov is None else c_ov,
                                         -inside, -ov.coverage, float(ov.starved or coll_loop.starved)]))
            starved = max(starved, reps[-1][6])
        med = [statistics.median(r[i] for r in reps) for i in range(6)]
        flags = []
        if starved:
            flags.append("starved")
        if -med[5] < 0.95:
            flags.append("partial_coverage")
        coll_ov = None if not math.isfinite(med[3]) else med[3]
        if coll_ov is None:
            flags.append("few_completions")
        return {"compute_alone_us": med[0], "coll_alone_us": med[1] if math.isfinite(med[1]) else None,
                "compute_overlap_us": med[2], "coll_overlap_us": coll_ov, "coll_calls_in_window": int(-med[4]),
                "coverage": round(-med[5], 4), "compute_calls": plan.compute_calls, "coll_calls": plan.coll_calls,
                "flags": ";".join(flags)}


# ---------------------------------------------------------------- driver


def _meta(torch, device, args, world: int, backend: str) -> dict:
    meta: dict[str, Any] = {
        "kind": "interference", "backend": backend, "world": world, "precision": args.precision,
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(),
        "env": {k: os.environ.get(k) for k in (*MULTICAST_OFF, *FOOTPRINT_ENV)},
        "protocol": {
            "repeats": args.repeats, "warmup_overlap_runs": args.warmup, "statistic": "median over repeats of the "
            "slowest rank's value", "window_ms": args.window_ms, "coverage": args.coverage,
            "timer": "cuda events, loops released by a gate event after a spin kernel" if device.type == "cuda"
            else "time.perf_counter, collective loop in a thread",
            "coll_overlap": "mean interval between collective completions inside the compute window",
            "coll_alone": "mean interval between completions of back-to-back calls",
            "launch": "async_op=True on a side stream, work.wait() then an event per call",
            "coll_bytes": "all_reduce buffer; all_gather/reduce_scatter per-rank shard; p2p per direction "
                          "(bidirectional batch_isend_irecv between ranks 2i, 2i+1)",
            "attention": "causal SDPA flash, forward + autograd.grad backward",
            "memory": "torch.add of two tensors into a third"}}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["gpu"] = torch.cuda.get_device_name(device)
        meta["sm_count"] = props.multi_processor_count
        try:
            meta["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # pragma: no cover - version() missing in some builds
            pass
    return meta


def _read_done(path: Path) -> set[tuple[str, str, str, int]]:
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with path.open(newline="") as fh:
        header = next(csv.reader(fh), [])
    if [c.strip() for c in header] != list(COLUMNS):
        raise ConfigError(f"{path}:1", "existing header is not this bench's; use another --out")
    data = path.read_bytes()
    if not data.endswith(b"\n"):  # cut mid-row by a crash: drop the fragment so it is re-measured
        with path.open("r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)
    return {(m.compute, m.compute_shape, m.collective, m.coll_bytes) for m in read_rows(path)}


def _append(path: Path, values: dict[str, Any]) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(COLUMNS)
        w.writerow(format_row(values))
        fh.flush()


def _size_label(nbytes: int) -> str:
    for unit, div in (("G", 2**30), ("M", MIB), ("K", 1024)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div}{unit}"
    return str(nbytes)


def print_table(path: Path, out=sys.stdout) -> None:
    """Two short pivot tables (compute slowdown, collective slowdown: kernel x collective@size),
    then the fitted class factors and the fit's notes."""
    rows = read_rows(path)
    if not rows:
        print("no rows", file=out)
        return
    abbrev = {"all_reduce": "ar", "all_gather": "ag", "reduce_scatter": "rs", "p2p": "p2p"}
    cols = sorted({(m.collective, m.coll_bytes) for m in rows},
                  key=lambda c: (COLLECTIVES.index(c[0]), c[1]))
    kernels = list(dict.fromkeys((m.compute, m.compute_shape) for m in rows))
    cell = {((m.compute, m.compute_shape), (m.collective, m.coll_bytes)): m for m in rows}
    heads = [f"{abbrev[c]}{_size_label(b)}" for c, b in cols]
    width = max(6, *(len(h) for h in heads))
    for title, get in (("compute slowdown (overlap / alone)", lambda m: m.compute_slowdown),
                       ("collective slowdown (overlap / alone)", lambda m: m.coll_slowdown)):
        print(f"{title}:", file=out)
        print(f"  {'kernel':28}" + "".join(f"{h:>{width + 1}}" for h in heads), file=out)
        for k in kernels:
            vals = []
            for c in cols:
                m = cell.get((k, c))
                v = None if m is None else get(m)
                vals.append("-" if v is None else f"{v:.3f}")
            print(f"  {k[0] + ' ' + k[1]:28}" + "".join(f"{v:>{width + 1}}" for v in vals), file=out)
    flagged = [m for m in rows if m.coverage is not None and m.coverage < 0.95]
    if flagged:
        print(f"  {len(flagged)} row(s) with coverage < 0.95 (see the flags column)", file=out)
    model = fit_interference(rows, source=str(path))
    print("fitted (median per class): compute " + ", ".join(f"{k} {v:.3f}" for k, v in model.compute.items())
          + "; collective " + ", ".join(f"{k} {v:.3f}" for k, v in model.collective.items()), file=out)
    for n in model.notes[:8]:
        print(f"  note: {n}", file=out)
    if len(model.notes) > 8:
        print(f"  ... {len(model.notes) - 8} more notes (calibration.interference.load_interference(...).notes)",
              file=out)


def _elapsed(t0: float) -> str:
    s = int(time.monotonic() - t0)
    return f"{s} s" if s < 90 else f"{s // 60} min {s % 60:02d} s"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m " + MODULE, description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except (ConfigError, TorchUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Measure under an already-launched torchrun world (reads RANK / WORLD_SIZE / LOCAL_RANK)."""
    ensure_multicast_off()  # before torch and NCCL exist
    _check_numbers(args)
    computes_wanted = _names(args.computes, "--computes", KINDS)
    colls = _names(args.collectives, "--collectives", COLLECTIVES)
    torch, dist, world, rank, device, backend = torchrun_world(args, "interference measurements",
                                                               launch_command(2, args.out))
    use_cuda = device.type == "cuda"
    defaults = GPU_DEFAULTS if use_cuda else CPU_DEFAULTS
    computes = {"gemm": _shapes(args.gemms or defaults["gemms"], "--gemms", 3),
                "attention": _shapes(args.attention or defaults["attention"], "--attention", 4),
                "memory": [(s[0],) for s in _shapes(args.memory_mib or defaults["memory_mib"], "--memory-mib", 1)]}
    computes = {k: v for k, v in computes.items() if k in computes_wanted}
    sizes = sorted({s for s in (x[0] for x in _shapes(args.sizes or defaults["sizes"], "--sizes", 1))})
    if "p2p" in colls and world % 2:
        colls = [c for c in colls if c != "p2p"]
        if rank == 0:
            print(f"p2p skipped: it pairs ranks (2i, 2i+1) and the world ({world}) is odd", file=sys.stderr)
    quiet = getattr(args, "quiet", False)
    # the CPU has no bf16 fast path worth timing, and gloo reduces fp32 natively: fp32 there
    comp_dtype = (torch.bfloat16 if args.precision == "bf16" else torch.float16) if use_cuda else torch.float32
    coll_dtype = torch.bfloat16 if args.precision == "bf16" else torch.float16
    root = Path(args.out)
    csv_path = root / CSV_FILE
    dist.init_process_group(backend, device_id=device if use_cuda else None)
    try:
        done: set = set()
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            meta = _meta(torch, device, args, world, backend)
            if (root / META_FILE).exists():  # resume: keep what the first run recorded, note this one
                try:
                    old = json.loads((root / META_FILE).read_text())
                except (OSError, json.JSONDecodeError) as e:
                    raise ConfigError(str(root / META_FILE), f"unreadable: {e}") from None
                for k in ("world", "precision", "gpu"):
                    if old.get(k) not in (None, meta.get(k)):
                        raise ConfigError(args.out, f"was measured with {k}={old.get(k)}, now {meta.get(k)}; "
                                          "use another --out")
                meta = {**meta, **old, "resumed": [*old.get("resumed", []), meta["date"]]}
            tmp = root / (META_FILE + ".tmp")
            tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, root / META_FILE)
            done = _read_done(csv_path)
        box: list[Any] = [done]
        dist.broadcast_object_list(box, src=0)  # every rank walks the same key list
        keys = plan_keys(computes, colls, sizes, box[0])
        clock = _CudaClock(torch, device) if use_cuda else _CpuClock()
        measurer = _Measurer(torch, dist, device, clock, rank)
        gen = torch.Generator(device=device).manual_seed(args.seed * 100_003 + rank)
        gpu = torch.cuda.get_device_name(device) if use_cuda else "cpu"
        t_start, last_key_s, skipped, stopped = time.monotonic(), 0.0, 0, 0
        cache: dict[tuple, tuple] = {}
        for i, key in enumerate(keys):
            # one decision for all ranks (rank 0's clock), or the collective counts would diverge
            go = 1.0
            if args.time_budget is not None and time.monotonic() - t_start + last_key_s > args.time_budget:
                go = 0.0
            flag = torch.tensor([go], dtype=torch.float64, device=device)
            dist.broadcast(flag, src=0)
            if flag.item() == 0.0:
                stopped = len(keys) - i
                break
            t_key = time.monotonic()
            ckey = (key.compute, key.shape)
            if ckey not in cache:
                cache.clear()  # one compute's buffers at a time
                if use_cuda:
                    torch.cuda.empty_cache()
                cache[ckey] = _compute_fn(torch, key, device, comp_dtype, gen)
            fn, comp_bytes = cache[ckey]
            if use_cuda:
                free = float(torch.cuda.mem_get_info(device)[0])
                need = float(key.coll_bytes * (world + 1))  # all_gather / reduce_scatter: shard + full buffer
                if measurer.reduce_max([need - args.mem_fraction * free])[0] > 0:
                    skipped += 1
                    continue
            coll, _ = _coll_fn(torch, dist, key, device, coll_dtype, gen, world, rank)
            res = measurer.key(fn, coll, args)
            del coll
            last_key_s = time.monotonic() - t_key
            if rank == 0:
                ca, co = res["compute_alone_us"], res["compute_overlap_us"]
                la, lo = res["coll_alone_us"], res["coll_overlap_us"]
                row = {"gpu": gpu, "world": world, "compute": key.compute, "compute_shape": key.shape_text,
                       "compute_flops": key.flops, "collective": key.collective, "coll_bytes": key.coll_bytes,
                       "compute_slowdown": co / ca, "coll_slowdown": None if la is None or lo is None else lo / la,
                       "repeats": args.repeats, **res}
                _append(csv_path, row)
                if not quiet:
                    cs = "-" if row["coll_slowdown"] is None else f"{row['coll_slowdown']:.3f}"
                    print(f"trainsim: interference: [{i + 1}/{len(keys)}] {key.compute} {key.shape_text} | "
                          f"{key.collective} {key.coll_bytes:,d} B: compute x{co / ca:.3f}, coll x{cs} "
                          f"{res['flags']}, {_elapsed(t_start)} elapsed", file=sys.stderr, flush=True)
        if rank == 0:
            if skipped:
                print(f"skipped {skipped} keys whose buffers exceed {args.mem_fraction:.0%} of free memory",
                      file=sys.stderr)
            if stopped:
                print(f"time budget reached: {stopped} keys left; run the same command again to resume",
                      file=sys.stderr)
            if csv_path.exists():
                print_table(csv_path)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_skipping_teardown(main())
