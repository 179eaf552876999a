"""Collective micro-benchmarks through torch.distributed: the samples of the collective regressors.

One process per GPU, launched by torchrun (NCCL), or several CPU processes (gloo)::

    env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python -m torch.distributed.run --standalone --nproc-per-node 8 \\
        -m trainsim.calibration.collectives_bench --out samples/h200-coll

(:func:`launch_command` builds that line.) NVLink multicast (NVLS) stays off: on the lent
machines a program using it can take the host's shared GPUs out of service, so this module
sets the three variables itself before the process group exists and refuses to run when one
of them is set to a value that would enable it.

Protocol, per (collective, message size, group size):

* every group size the machine allows: the powers of two 2, 4, ... that divide the world,
  and the world itself. The world is split into consecutive-rank groups (Megatron's MP
  groups are consecutive ranks) that all run at once, as the groups of a real job do;
  rank 0's group is the one recorded. A single host is recorded as ``nodes=1,
  gpus_per_node=group size``. Point-to-point runs between rank pairs (2i, 2i+1), even
  sending to odd, recorded as ``nodes=1, gpus_per_node=2`` (the span
  :meth:`topology.placement.Placement.p2p_span` gives an intra-node pair);
* message sizes log-spaced from ``--min-bytes`` (1 MiB) to ``--max-bytes`` (4 GiB),
  ``--per-octave`` points per doubling; the size is ``Collective.bytes``: the buffer of an
  all-reduce, the per-rank shard of an all-gather / reduce-scatter (so their full buffers
  are ``group`` times larger), the message of a P2P send;
* random fp16/bf16 data (never zeros), one seeded generator per rank;
* ``--warmup`` untimed calls, then ``--iters`` timed ones; before each timed call the
  group's ranks meet at a barrier, then each rank times the call alone with CUDA events
  (``time.perf_counter`` on the CPU). The recorded duration of a call is the maximum over
  the group's ranks (``--reduce max``; ``min`` is the last rank to arrive, the least skew);
* EVERY timed call is one row of ``collectives.csv`` with its ``iteration`` index (the
  jitter model fits per-call times). Only rank 0 writes. Rows are appended and flushed
  per (collective, size, group) as soon as measured, so an interrupted run resumes:
  work whose ``iters`` iterations are all present is skipped, a partly written one gets
  only its missing iterations.

torch is imported lazily, as in :mod:`calibration.harness`.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainsim.calibration.harness import TorchUnavailable, import_torch
from trainsim.calibration.samples import META_FILE, CollectiveSample, SampleWriter, read_meta
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind

#: NVLink multicast off in NCCL, PyTorch's symmetric memory and NVSHMEM (device KINDS.md).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

MIN_BYTES = 2**20
MAX_BYTES = 4 * 2**30
COLLECTIVES = (CollKind.ALL_REDUCE, CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.P2P)


def ensure_multicast_off(environ=None) -> None:
    """Set the multicast-off variables where unset; raise if one is set to enable multicast.

    Must run before ``init_process_group`` (NCCL reads its environment at communicator
    creation). Called by every process this project launches on GPUs.
    """
    env = os.environ if environ is None else environ
    for key, value in MULTICAST_OFF.items():
        env.setdefault(key, value)
        if env[key].strip() != value:
            raise ConfigError(key, f"is {env[key]!r}; NVLink multicast must stay off ({key}={value}): "
                                   "it can take a shared host's GPUs out of service")


def launch_command(nproc: int, out: str, extra_args: Sequence[str] = (), python: str | None = None) -> list[str]:
    """The torchrun command line for ``nproc`` processes on this host, multicast off in its env.

    ``env VAR=... python -m torch.distributed.run --standalone --nproc-per-node N -m
    calibration.collectives_bench --out OUT ...``: the variables are on the command line
    (not only inherited) so that every worker torchrun starts carries them.
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 2:
        raise ConfigError("--nproc-per-node", f"collectives need at least 2 processes, got {nproc!r}")
    return ["env", *(f"{k}={v}" for k, v in MULTICAST_OFF.items()),
            python or sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", "trainsim.calibration.collectives_bench", "--out", str(out), *extra_args]


def message_sizes(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES, per_octave: int = 1) -> list[int]:
    """Log-spaced message sizes in bytes, even (2-byte entries), ``per_octave`` points per doubling."""
    if min_bytes < 2 or max_bytes < min_bytes:
        raise ConfigError("--min-bytes", f"need 2 <= min-bytes <= max-bytes, got {min_bytes}, {max_bytes}")
    if per_octave < 1:
        raise ConfigError("--per-octave", f"must be >= 1, got {per_octave}")
    steps = math.floor(per_octave * math.log2(max_bytes / min_bytes) + 1e-9)
    sizes = {2 * max(1, round(min_bytes * 2 ** (k / per_octave) / 2)) for k in range(steps + 1)}
    return sorted(sizes)


def group_sizes(world: int) -> list[int]:
    """2, 4, 8, ... dividing ``world``, and ``world`` itself."""
    out = [g for g in (2**k for k in range(1, world.bit_length() + 1)) if g <= world and world % g == 0]
    if world >= 2 and world not in out:
        out.append(world)
    return out


@dataclass(frozen=True)
class Task:
    kind: CollKind
    entries: int
    group: int  # ranks in the group (2 for P2P)
    start_iteration: int  # rows already written for this key (resume)

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.kind.value, self.entries, 1, self.group)


def plan(kinds: Sequence[CollKind], sizes: Sequence[int], groups: Sequence[int], iters: int,
         done: Counter) -> list[Task]:
    """Everything still to measure, in a fixed order; ``done`` counts rows per key."""
    out = []
    for kind in kinds:
        for g in ([2] if kind is CollKind.P2P else groups):
            for nbytes in sizes:
                c = Collective(kind, nbytes // 2, 1, g)
                have = done[(kind.value, c.entries, c.nodes, c.gpus_per_node)]
                if have < iters:
                    out.append(Task(kind, c.entries, g, have))
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="sample directory to create or resume")
    p.add_argument("--collectives", default="all", metavar="KINDS",
                   help="comma-separated of all_reduce,all_gather,reduce_scatter,p2p (default all)")
    p.add_argument("--min-bytes", type=int, default=MIN_BYTES, help="smallest message (default 1 MiB)")
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="largest message (default 4 GiB)")
    p.add_argument("--per-octave", type=int, default=1, help="sizes per doubling (2 gives held-out midpoints)")
    p.add_argument("--sizes", default=None, metavar="BYTES",
                   help="explicit comma-separated message sizes in bytes (overrides min/max/per-octave)")
    p.add_argument("--groups", default=None, metavar="SIZES",
                   help="comma-separated group sizes (default: 2, 4, ... dividing the world, and the world)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl when CUDA is available, else gloo on the CPU")
    p.add_argument("--reduce", choices=("max", "min"), default="max",
                   help="a call's duration over the group's ranks (default max)")
    p.add_argument("--mem-fraction", type=float, default=0.6,
                   help="skip sizes whose buffers need more than this share of free GPU memory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-q", "--quiet", action="store_true", help="no per-task progress lines (errors still print)")


def _parse_ints(text: str, field: str) -> list[int]:
    try:
        vals = [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ConfigError(field, f"expected positive integers, got {text!r}")
    return vals


def _parse_kinds(text: str) -> list[CollKind]:
    if text == "all":
        return list(COLLECTIVES)
    try:
        return [CollKind(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("--collectives", f"unknown collective in {text!r}; known: "
                          + ", ".join(k.value for k in COLLECTIVES)) from None


class _Runner:
    """One process's view: its groups, buffers and timer."""

    def __init__(self, torch, dist, device, dtype, world: int, rank: int, seed: int) -> None:
        self.torch, self.dist, self.device, self.dtype = torch, dist, device, dtype
        self.world, self.rank = world, rank
        self.cuda = device.type == "cuda"
        self.gen = torch.Generator(device=device).manual_seed(seed * 100_003 + rank)
        self.groups: dict[int, tuple] = {}  # size -> (my group handle, my group's ranks)
        # every rank creates every group, in the same order (new_group is collective)
        for g in group_sizes(world):
            for first in range(0, world, g):
                ranks = list(range(first, first + g))
                handle = dist.new_group(ranks) if g < world else dist.group.WORLD
                if rank in ranks:
                    self.groups[g] = (handle, ranks)

    def group(self, g: int):
        if g not in self.groups:
            # group sizes outside group_sizes() (from --groups) are made on demand; every rank asks
            for first in range(0, self.world, g):
                ranks = list(range(first, first + g))
                handle = self.dist.new_group(ranks)
                if self.rank in ranks:
                    self.groups[g] = (handle, ranks)
        return self.groups[g]

    def randn(self, n: int):
        t = self.torch.randn(n, generator=self.gen, device=self.device, dtype=self.torch.float32)
        return t.to(self.dtype)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def barrier(self, handle) -> None:
        if self.cuda:
            self.dist.barrier(group=handle, device_ids=[self.device.index])
        else:
            self.dist.barrier(group=handle)
        self.sync()

    def call(self, task: Task):
        """(a function running one call, group handle) with buffers allocated."""
        dist, kind, n = self.dist, task.kind, task.entries
        if kind is CollKind.P2P:
            handle, _ = self.group(2)
            base = self.rank - self.rank % 2
            buf = self.randn(n)
            if self.rank % 2 == 0:
                return (lambda: dist.send(buf, base + 1)), handle
            return (lambda: dist.recv(buf, base)), handle
        handle, _ = self.group(task.group)
        g = task.group
        if kind is CollKind.ALL_REDUCE:
            buf = self.randn(n)
            return (lambda: dist.all_reduce(buf, group=handle)), handle
        if kind is CollKind.ALL_GATHER:
            shard, full = self.randn(n), self.torch.empty(n * g, device=self.device, dtype=self.dtype)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return (lambda: gather(full, shard, group=handle)), handle
        full, shard = self.randn(n * g), self.torch.empty(n, device=self.device, dtype=self.dtype)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return (lambda: scatter(shard, full, group=handle)), handle

    def time_task(self, task: Task, warmup: int, iters: int, reduce: str) -> list[float]:
        """Per-call durations in microseconds (reduced over the group), on every rank."""
        torch = self.torch
        fn, handle = self.call(task)
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(iters):
            self.barrier(handle)
            if self.cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                out.append(s.elapsed_time(e) * 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e6)
        t = torch.tensor(out, dtype=torch.float64, device=self.device)
        op = self.dist.ReduceOp.MAX if reduce == "max" else self.dist.ReduceOp.MIN
        self.dist.all_reduce(t, op=op, group=handle)
        return [float(x) for x in t.cpu()]


def _fits(task: Task, elem: int, free_bytes: int | None, fraction: float) -> bool:
    if free_bytes is None:
        return True
    g = 1 if task.kind in (CollKind.ALL_REDUCE, CollKind.P2P) else task.group
    return elem * task.entries * (g + 1) <= fraction * free_bytes


def _meta(torch, dist, device, args, world: int, backend: str) -> dict:
    meta = {"kind": "collectives", "backend": backend, "world": world, "nodes": 1, "precision": args.precision,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat(),
            "env": {k: os.environ.get(k) for k in MULTICAST_OFF},
            "protocol": {"warmup": args.warmup, "iters": args.iters, "reduce_over_ranks": args.reduce,
                         "timer": "cuda events" if device.type == "cuda" else "time.perf_counter",
                         "barrier_before_each_call": True, "concurrent_groups": True,
                         "entries": "all_reduce buffer; all_gather/reduce_scatter per-rank shard; p2p message"}}
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
        nccl = getattr(torch.cuda, "nccl", None)
        if nccl is not None:
            try:
                meta["nccl"] = ".".join(str(x) for x in nccl.version())
            except Exception:  # pragma: no cover - version() missing in some builds
                pass
    return meta


def _elapsed(t0: float) -> str:
    s = int(time.monotonic() - t0)
    return f"{s} s" if s < 90 else f"{s // 60} min {s % 60:02d} s"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainsim calibrate collectives", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except (ConfigError, TorchUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def torchrun_world(args: argparse.Namespace, what: str, launch: list[str]) -> tuple[Any, Any, int, int, Any, str]:
    """(torch, torch.distributed, world, rank, device, backend) of a benchmark running inside torchrun.

    Outside torchrun (no WORLD_SIZE) a ConfigError shows ``launch``; fewer than 2 ranks, or a
    ``--backend`` the machine lacks, is refused. The CUDA device is the process's LOCAL_RANK.
    """
    if "WORLD_SIZE" not in os.environ:
        raise ConfigError("WORLD_SIZE", "not set: launch under torchrun, e.g. " + " ".join(launch))
    torch = import_torch()
    import torch.distributed as dist

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if world < 2:
        raise ConfigError("--nproc-per-node", f"{what} need at least 2 processes")
    use_cuda = args.backend == "nccl" or (args.backend == "auto" and torch.cuda.is_available())
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return torch, dist, world, rank, device, "nccl" if args.backend != "gloo" else "gloo"
    return torch, dist, world, rank, torch.device("cpu"), "gloo"


def run(args: argparse.Namespace) -> int:
    """Measure under an already-launched torchrun world (reads RANK / WORLD_SIZE / LOCAL_RANK)."""
    ensure_multicast_off()
    kinds = _parse_kinds(args.collectives)
    sizes = (sorted({2 * max(1, s // 2) for s in _parse_ints(args.sizes, "--sizes")}) if args.sizes
             else message_sizes(args.min_bytes, args.max_bytes, args.per_octave))
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError("--iters", "need iters >= 1 and warmup >= 0")
    torch, dist, world, rank, device, backend = torchrun_world(args, "collectives", launch_command(2, args.out))
    use_cuda = device.type == "cuda"
    groups = _parse_ints(args.groups, "--groups") if args.groups else group_sizes(world)
    for g in groups:
        if g < 2 or world % g:
            raise ConfigError("--groups", f"group size {g} must be >= 2 and divide the world ({world})")
    dist.init_process_group(backend)
    try:
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float16
        runner = _Runner(torch, dist, device, dtype, world, rank, args.seed)
        writer = None
        done: Counter = Counter()
        if rank == 0:
            root = Path(args.out)
            meta = _meta(torch, dist, device, args, world, backend)
            if (root / META_FILE).exists():  # resume: keep what the first run recorded, note this one
                old = read_meta(root / META_FILE)
                if old.get("world") not in (None, world) or old.get("precision") not in (None, args.precision):
                    raise ConfigError(args.out, f"was measured with world={old.get('world')}, "
                                      f"precision={old.get('precision')}; use another --out")
                meta = {**meta, **old, "resumed": [*old.get("resumed", []), meta["date"]]}
            writer = SampleWriter(root, meta, iteration_column=True)
            done = Counter(
                (s.coll.kind.value, s.coll.entries, s.coll.nodes, s.coll.gpus_per_node)
                for s in writer.done_collectives())
        box = [done]
        dist.broadcast_object_list(box, src=0)  # every rank walks the same task list
        if CollKind.P2P in kinds and world % 2:
            kinds = [k for k in kinds if k is not CollKind.P2P]
            if rank == 0 and not getattr(args, "quiet", False):
                print(f"p2p skipped: it pairs ranks (2i, 2i+1) and the world ({world}) is odd", file=sys.stderr)
        tasks = plan(kinds, sizes, groups, args.iters, box[0])
        free = None
        if use_cuda:
            free = torch.cuda.mem_get_info(device)[0]
            t = torch.tensor([free], dtype=torch.int64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            free = int(t.item())
        elem = 2
        skipped = 0
        t_start = time.monotonic()
        for i, task in enumerate(tasks):
            if not _fits(task, elem, free, args.mem_fraction):
                skipped += 1
                continue
            need = args.iters - task.start_iteration
            times = runner.time_task(task, args.warmup, need, args.reduce)
            if writer is not None:
                coll = Collective(task.kind, task.entries, 1, task.group)
                for j, us in enumerate(times):
                    writer.append_collective(CollectiveSample(coll, us, task.start_iteration + j))
                med = sorted(times)[len(times) // 2]
                if not getattr(args, "quiet", False):  # progress: one line per task on stderr
                    print(f"trainsim: collectives: [{i + 1}/{len(tasks)}] {task.kind.value:14} group {task.group} "
                          f"{2 * task.entries:>12,d} B  median {med:10.1f} us, {_elapsed(t_start)} elapsed",
                          file=sys.stderr, flush=True)
            if use_cuda:
                torch.cuda.empty_cache()
        if rank == 0 and skipped and not getattr(args, "quiet", False):
            print(f"skipped {skipped} tasks whose buffers exceed {args.mem_fraction:.0%} of free memory",
                  file=sys.stderr)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def exit_skipping_teardown(code: int) -> None:
    """Flush and leave without interpreter teardown: torch's gloo threads occasionally abort while
    Python unwinds ("terminate called without an active exception", torch 2.13 on the CPU), after
    every row is written, which would fail a complete run. For the scripts run under torchrun."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_skipping_teardown(main())
