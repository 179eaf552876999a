"""Probe: the GPU time of FSDP2's own copy kernels, one GPU, no communication (issues 12 and 15).

FSDP2 (``torch.distributed.fsdp.fully_shard``, torch 2.6 and later) moves every parameter and
gradient of a unit through three copies besides its collectives (``_fsdp_collectives.py``):

* ``copy_in``: ``torch._foreach_copy_`` of the rank's shards into the all-gather's flat input
  (``all_gather_copy_in``, on its own stream);
* ``copy_out``: ``split_with_sizes_copy`` of the all-gather's ``[world, shard]`` output into the
  unsharded parameters (``foreach_all_gather_copy_out``, on the compute stream);
* ``chunk_cat``: ``torch._chunk_cat`` of the unsharded gradients into the reduce-scatter's input
  (``foreach_reduce``, on the compute stream before the reduce-scatter stream waits for it);

and the simulation priced the second and third at the rate of another kernel (the gradient
accumulation's ``add``, also timed here as ``accumulate``: ``grad += new`` per tensor). This probe
times each on the tensors of one Hugging Face GPT-NeoX layer of hidden size ``d`` (fp32, as the
trainer keeps them; the same twelve tensors as ``operators/hf_stages.py`` ``hf_layer_tensors``)
and of the root unit (embedding and LM head, vocabulary ``--vocab``), for ``world`` = 2 and 4: the
GPU's busy time per call (kernels and copies, from ``torch.profiler``), the mean over ``--reps``
calls after ``--warmup``. One JSON line per (op, unit, d, world): the bytes the kernels read and
write and their seconds.

    PYTHONPATH=. python validation/probe_fsdp_copies.py --out copies.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HIDDEN = (512, 1024, 2048, 3072, 4096, 5120, 6144, 8192)
WORLDS = (2, 4)
VOCAB = 50432
FP32_BYTES = 4


def layer_tensors(d: int) -> list[tuple[int, ...]]:
    """One GPT-NeoX layer's parameter shapes (f = 4d): the dim-0 sharded ones as FSDP2 sees them."""
    f = 4 * d
    return [(3 * d, d), (3 * d,), (d, d), (d,), (f, d), (f,), (d, f), (d,), (d,), (d,), (d,), (d,)]


def root_tensors(d: int, vocab: int) -> list[tuple[int, ...]]:
    """The root unit: the input embedding, the LM head and the final LayerNorm."""
    return [(vocab, d), (vocab, d), (d,), (d,)]


def padded(n: int, world: int) -> int:
    return -(-n // world) * world


def time_op(torch, fn, warmup: int, reps: int) -> float:
    """Seconds the GPU is busy per call of ``fn``: its kernels and copies (the CUDA activities of
    ``torch.profiler``) over ``reps`` calls, averaged. Not CUDA events around the call: ``_chunk_cat``
    first builds its pointer table on the host and copies it over, and events would count that
    host time too, which a training step hides behind the GPU work queued before it (measured:
    1.04 ms by events against 0.44 ms of kernel at d = 4096, world 2)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    busy_us = sum(e.device_time_total for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    return busy_us * 1e-6 / reps


def probe_unit(torch, shapes: list[tuple[int, ...]], world: int, warmup: int,
               reps: int) -> dict[str, tuple[int, float]]:
    """(bytes read and written, seconds) of each copy of one FSDP2 unit of these parameter shapes."""
    dev = torch.device("cuda")
    numels = [1] * len(shapes)
    for i, s in enumerate(shapes):
        for n in s:
            numels[i] *= n
    # FSDP2 pads each tensor's dim 0 to a multiple of world; a shard is 1/world of the padded tensor
    shard = [padded(s[0], world) // world * (numels[i] // s[0]) for i, s in enumerate(shapes)]
    total = sum(shard)
    out_ag = torch.empty(world, total, device=dev)
    shards = [torch.randn(n, device=dev) for n in shard]
    flat_in = out_ag[0]
    dsts = list(torch.split(flat_in, shard))
    unsharded = [torch.empty(world, n, device=dev) for n in shard]  # the [world, shard] views of the parameters
    grads = [torch.randn(s, device=dev) for s in shapes]  # the unsharded gradients, unpadded, as autograd leaves them
    rs_in = torch.empty(world, total, device=dev)
    acc = [torch.zeros(s, device=dev) for s in shapes]
    full = world * total * FP32_BYTES  # the padded unsharded bytes (the gradients' own are up to world - 1 rows fewer)
    ops = {
        "copy_in": (2 * total * FP32_BYTES, lambda: torch._foreach_copy_(dsts, shards)),
        "copy_out": (2 * full, lambda: torch.split_with_sizes_copy(out_ag, shard, dim=1, out=unsharded)),
        "chunk_cat": (2 * full, lambda: torch._chunk_cat(grads, dim=0, num_chunks=world, out=rs_in)),
        "accumulate": (3 * full, lambda: [a.add_(g) for a, g in zip(acc, grads, strict=True)]),
    }
    return {name: (nbytes, time_op(torch, fn, warmup, reps)) for name, (nbytes, fn) in ops.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, metavar="JSONL")
    ap.add_argument("--hidden", default=",".join(map(str, HIDDEN)), help="comma-separated hidden sizes")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    try:
        hidden = [int(x) for x in args.hidden.split(",")]
    except ValueError:
        print(f"error: --hidden {args.hidden!r}: comma-separated integers", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("error: this probe needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    with Path(args.out).open("a") as fh:
        for d in hidden:
            for world in WORLDS:
                for unit, shapes in (("layer", layer_tensors(d)), ("root", root_tensors(d, args.vocab))):
                    timed = probe_unit(torch, shapes, world, args.warmup, args.reps)
                    torch.cuda.empty_cache()  # the unit's tensors are gone with probe_unit's frame
                    for op, (nbytes, secs) in timed.items():
                        row = {"op": op, "unit": unit, "hidden": d, "world": world, "bytes": nbytes,
                               "seconds": secs, "tb_per_s": nbytes / secs / 1e12, "device": gpu,
                               "torch": torch.__version__}
                        fh.write(json.dumps(row) + "\n")
                        print(f"{op:10s} {unit:5s} d={d:5d} w={world} {nbytes / 2**20:9.1f} MiB "
                              f"{secs * 1e3:8.3f} ms {row['tb_per_s']:5.2f} TB/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
