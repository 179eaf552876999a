"""Does a GPU's time in NCCL collectives draw power as its copies do? The power cap's curve
(:mod:`calibration.power_cap`) was measured with GEMM:copy mixes, and the simulation counts every
second a GPU is not in tensor-core work as such a copy (``sim.costs.power_cap_shares``): exposed
all-gathers, reduce-scatters and all-reduces included. This probe measures the same burst-against-
sustained slowdown with the copies replaced by NCCL collectives of the same size, on every GPU of the
host at once (torchrun, one process per GPU; the collective spans all of them).

Kernels (``--kernels``; the GEMM and the copy are :func:`calibration.power_bench.make`'s):

* ``gemm_bf16_8192``, ``copy_256mib``: the lone GEMM and copy (the curve's ends, on this machine);
* ``ag_256mib``, ``ar_256mib``: an all-gather into a 256 MiB output, an all-reduce of 256 MiB, alone;
* ``mix_bf16_c<N>``: the GEMM, then N copies (the curve's mixes, again here);
* ``mix_bf16_ag<N>``, ``mix_bf16_ar<N>``: the GEMM, then N all-gathers (all-reduces) on the same stream;
* ``blk<K>_i<N>``: K GEMMs, then N ms of idle GPU (:class:`GemmBlock`): at one D, whether a long idle
  stretch lowers the throttle as a short one does (the time scale of the cap's averaging). Its D is
  K lone GEMM bursts over those and the idle, its g the block's sustained time over them (the
  block's own first runs when the file has no lone GEMM: for a long block they are already loaded).

A mix's D is the GEMM's burst over the mix's burst, its g the mix's sustained time less N times its
other kernel's own sustained time, over the GEMM's burst (``python validation/probe_power_comm.py
--summarize <jsonl>``). If the collective mixes give the copy mixes' g at the same D, the simulation's
accounting is right; if they throttle more, a collective draws more than a copy.

    env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. \\
      python3 -m torch.distributed.run --standalone --nproc-per-node 2 validation/probe_power_comm.py \\
      --out out/power_comm.jsonl

Timing as :func:`calibration.power_bench.worker`'s: every rank idles ``--idle-s``, times a burst
(a sleep kernel holding the GPU, 20 runs, the mean of the middle five of the last ten), then loads the
GPU for ``--sustain-s`` seconds; the window is the second half's wall time per kernel. The ranks agree
on the number of batches first (the collectives must match), so the load lasts about ``--sustain-s``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainsim.calibration.power_bench import make as make_local
from trainsim.calibration.power_bench import sample_until, timed

KERNELS = ("gemm_bf16_8192", "copy_256mib", "ag_256mib", "ar_256mib", "mix_bf16_c1", "mix_bf16_ag1",
           "mix_bf16_c2", "mix_bf16_ag2", "mix_bf16_c4", "mix_bf16_ag4", "mix_bf16_ar1", "mix_bf16_ar2")
MIB256 = 1 << 27  # bf16 elements in 256 MiB


class GemmBlock:
    """``blk<K>_i<N>``: K GEMMs back to back (their span timed by CUDA events on every call), then the
    GPU idle for N ms (the host synchronises and sleeps): the throttle's time scale, at D ~ K x 1.4 /
    (K x 1.4 + N) on an H200. ``spans`` keeps the GEMM block's seconds per call."""

    def __init__(self, torch: Any, dev: Any, k: int, idle_ms: int) -> None:
        self.torch, self.k, self.idle_s = torch, k, idle_ms * 1e-3
        self.gemm, _ = make_local(torch, "gemm_bf16_8192", dev)
        self.spans: list[float] = []

    def __call__(self) -> None:
        a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(self.k):
            self.gemm()
        b.record()
        b.synchronize()
        self.spans.append(a.elapsed_time(b) * 1e-3)
        time.sleep(self.idle_s)


def make(torch: Any, dist: Any, kind: str, dev: Any, world: int) -> Any:
    """The kernel's callable (see the module doc)."""
    if kind.startswith("blk"):
        gemms, idle_ms = kind[3:].split("_i")
        return GemmBlock(torch, dev, int(gemms), int(idle_ms))
    if kind in ("ag_256mib", "ar_256mib"):
        if kind == "ag_256mib":
            out = torch.empty(MIB256, device=dev, dtype=torch.bfloat16)
            inp = torch.randn(MIB256 // world, device=dev, dtype=torch.bfloat16)
            return lambda: dist.all_gather_into_tensor(out, inp)
        buf = torch.randn(MIB256, device=dev, dtype=torch.bfloat16)
        return lambda: dist.all_reduce(buf)
    if kind.startswith("mix_bf16_"):
        other_kind, n = kind[len("mix_bf16_"):], 0
        for tag, name in (("c", "copy_256mib"), ("ag", "ag_256mib"), ("ar", "ar_256mib")):
            if other_kind.startswith(tag) and other_kind[len(tag):].isdigit():
                n, other_kind = int(other_kind[len(tag):]), name
                break
        if n == 0:
            raise SystemExit(f"--kernels: cannot parse {kind!r}")
        gemm, _ = make_local(torch, "gemm_bf16_8192", dev)
        other = make(torch, dist, other_kind, dev, world)

        def mix() -> None:
            gemm()
            for _ in range(n):
                other()
        return mix
    fn, _ = make_local(torch, kind, dev)
    return fn


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="JSON lines, one per rank and kernel (rank 0 writes them all)")
    p.add_argument("--kernels", type=lambda v: v.split(","), default=list(KERNELS))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--sustain-s", type=float, default=10.0)
    p.add_argument("--idle-s", type=float, default=3.0)
    p.add_argument("--summarize", metavar="JSONL", help="print the D and g of every mix in a finished file")
    args = p.parse_args(argv)
    if args.summarize:
        print("\n".join(summarize([json.loads(x) for x in Path(args.summarize).read_text().splitlines() if x])))
        return 0
    if not args.out:
        p.error("--out is required")
    import os

    import torch
    import torch.distributed as dist

    from trainsim.calibration.collectives_bench import ensure_multicast_off

    ensure_multicast_off()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for kind in args.kernels:
            fn = make(torch, dist, kind, dev, world)
            fn()
            torch.cuda.synchronize()
            dist.barrier()
            time.sleep(args.idle_s)
            dist.barrier()
            torch.cuda._sleep(2_000_000)
            burst = statistics.mean(sorted(timed(torch, fn, 20)[10:])[2:7])
            batch = max(1, int(0.1 / burst))  # about 100 ms of work between synchronisations
            n = torch.tensor([max(2, int(args.sustain_s / (batch * burst)))], device=dev)
            dist.all_reduce(n, op=dist.ReduceOp.MIN)  # the same number of collectives on every rank
            n_batches = int(n.item())
            samples: list[dict[str, Any]] = []
            t_end = time.time() + args.sustain_s * 1.3
            sampler = threading.Thread(target=sample_until, args=(local, t_end, samples), daemon=True)
            sampler.start()
            marks = []
            spans_at_half = 0
            for i_batch in range(n_batches):
                if i_batch == n_batches // 2 and isinstance(fn, GemmBlock):
                    spans_at_half = len(fn.spans)
                for _ in range(batch):
                    fn()
                torch.cuda.synchronize()
                marks.append(time.time())
            spans_at_end = len(fn.spans) if isinstance(fn, GemmBlock) else 0
            half = n_batches // 2
            window = (marks[-1] - marks[half - 1]) / ((n_batches - half) * batch)
            sustained = statistics.mean(sorted(timed(torch, fn, 20))[7:12])
            sampler.join()
            ok = [s for s in samples if s]
            gemm_block = {}
            if isinstance(fn, GemmBlock):  # the GEMMs' own time: burst (the timed runs' middle) against sustained
                gemm_block = {"block_k": fn.k, "idle_ms": fn.idle_s * 1e3,
                              # spans: the warm-up call, the burst's 20 timed runs, the sustained load
                              "block_burst_s": statistics.mean(sorted(fn.spans[11:21])[2:7]),
                              "block_window_s": statistics.mean(fn.spans[spans_at_half:spans_at_end])}
            row = {"round": rnd, "kernel": kind, "rank": rank, "world": world, **gemm_block,
                   "name": torch.cuda.get_device_name(local), "burst_s": burst, "sustained_s": sustained,
                   "window_s": window, "window_ratio": window / burst, "load_s": marks[-1] - marks[0] + 0.0,
                   "sm_mhz_median": statistics.median(s["sm_mhz"] for s in ok) if ok else None,
                   "power_w_median": statistics.median(s["power_w"] for s in ok) if ok else None,
                   "temp_c_max": max(s["temp_c"] for s in ok) if ok else None}
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, row)
            if rank == 0:
                rows.extend(gathered)
                with open(args.out, "a") as f:
                    for r in gathered:
                        f.write(json.dumps(r) + "\n")
                print(f"{kind:16s} " + "  ".join(f"r{r['rank']} burst {r['burst_s'] * 1e3:.3f} ms window/burst "
                                                 f"{r['window_ratio']:.3f} {r['sm_mhz_median']} MHz "
                                                 f"{r['power_w_median']} W" for r in gathered), flush=True)
            del fn
            torch.cuda.empty_cache()
    if rank == 0:
        print("\n".join(summarize(rows)))
    dist.destroy_process_group()
    return 0


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Per mix (mean over ranks and rounds): D = GEMM burst / mix burst; g = (mix window - N x other's
    window) / GEMM burst; and the lone kernels' window over burst."""
    def mean_of(kind: str, key: str) -> float | None:
        vals = [r[key] for r in rows if r["kernel"] == kind]
        return statistics.mean(vals) if vals else None

    lines = ["kernel            D      g      (window/burst)   SM MHz   W"]
    gemm_b = mean_of("gemm_bf16_8192", "burst_s")
    for kind in dict.fromkeys(r["kernel"] for r in rows):
        wr, mhz, w = mean_of(kind, "window_ratio"), mean_of(kind, "sm_mhz_median"), mean_of(kind, "power_w_median")
        d = g = None
        if kind.startswith("mix_bf16_") and gemm_b:
            tag = kind[len("mix_bf16_"):]
            other, n = (("copy_256mib", tag[1:]) if tag.startswith("c") else
                        ("ag_256mib", tag[2:]) if tag.startswith("ag") else ("ar_256mib", tag[2:]))
            ow = mean_of(other, "window_s")
            mb, mw = mean_of(kind, "burst_s"), mean_of(kind, "window_s")
            if ow is not None and mb and mw:
                d = gemm_b / mb
                g = (mw - int(n) * ow) / gemm_b
        elif kind.startswith("blk"):  # the GEMM block's own sustained time over its burst
            bb, bw, idle = mean_of(kind, "block_burst_s"), mean_of(kind, "block_window_s"), mean_of(kind, "idle_ms")
            if gemm_b:  # a long block's first runs are already under load: K lone GEMM bursts instead
                bb = gemm_b * (mean_of(kind, "block_k") or 0.0)
            if bb and bw and idle is not None:
                d, g = bb / (bb + idle * 1e-3), bw / bb
        elif kind == "gemm_bf16_8192":
            d, g = 1.0, wr
        lines.append(f"{kind:16s} {'' if d is None else f'{d:.3f}':>6s} {'' if g is None else f'{g:.3f}':>6s}   "
                     f"{wr:.3f}            {mhz or 0:6.0f}  {w or 0:5.0f}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
