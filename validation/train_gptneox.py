"""End-to-end validation run: train Hugging Face GPT-NeoX on one GPU and time it.

Run on the GPU machine (needs torch with CUDA and transformers):

    PYTHONPATH=. python validation/train_gptneox.py --out validation/measured_h100.csv

The workload (docs/h100.md): ``GPTNeoXForCausalLM`` with random init, vocabulary 50432,
intermediate size 4d, the default partial rotary (25%) and parallel residual,
``attn_implementation="sdpa"``, no dropout, ``use_cache=False``; fp32 weights on the GPU,
``torch.autocast`` in bf16; per micro-batch ``loss = model(input_ids=x, labels=x).loss;
loss.backward()``; then a fused ``torch.optim.AdamW`` step and
``zero_grad(set_to_none=True)``. One iteration = m micro-batches + the optimizer step.
Recompute = ``gradient_checkpointing_enable()``. We report the minimum over ``--iters``
(>= 8) timed iterations after ``--warmup`` and ``torch.cuda.max_memory_allocated()``.

One extra iteration is timed piecewise with CUDA events (forward, backward per
micro-batch, optimizer) for the per-piece comparison in docs/h100.md.
Configurations come from ``validation/configs.csv``; rows already in ``--out`` are
skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import csv
import gc
import statistics
import sys
import time
from pathlib import Path

VOCAB = 50432
COLUMNS = ("name", "hidden", "heads", "layers", "seq_len", "micro_batch", "micro_batches", "recompute", "vocab",
           "iteration_s", "iteration_median_s", "iters", "fwd_s", "bwd_s", "optimizer_s",
           "max_memory_allocated_bytes", "static_memory_bytes", "gpu", "torch", "transformers")


def run_config(row: dict, warmup: int, iters: int) -> dict:
    import torch
    import transformers
    from train_hf_parallel import Shape, build_model  # the one GPT-NeoX builder of both trainers

    d, h, n = int(row["hidden"]), int(row["heads"]), int(row["layers"])
    l, b, m = int(row["seq_len"]), int(row["micro_batch"]), int(row["micro_batches"])
    recompute = row["recompute"] == "full"
    dev = torch.device("cuda")
    model = build_model(torch, Shape(row["name"], d, h, n, l, b, m), VOCAB, dev)
    if recompute:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device=dev).manual_seed(1)
    xs = [torch.randint(0, VOCAB, (b, l), device=dev, generator=gen) for _ in range(m)]

    def micro(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        return loss

    def iteration():
        for x in xs:
            micro(x)
        opt.step()
        opt.zero_grad(set_to_none=True)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        iteration()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        iteration()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated()
    static = torch.cuda.memory_allocated()

    # piecewise: forward and backward of each micro-batch, then the optimizer, with events
    marks = []
    for x in xs:
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        e1.record()
        loss.backward()
        e2.record()
        marks.append((e0, e1, e2))
    torch.cuda.synchronize()
    fwd = sum(a.elapsed_time(b_) for a, b_, _ in marks) / 1e3
    bwd = sum(b_.elapsed_time(c) for _, b_, c in marks) / 1e3
    o0, o1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    o0.record()
    opt.step()
    opt.zero_grad(set_to_none=True)
    o1.record()
    torch.cuda.synchronize()
    out = {k: row[k] for k in ("name", "hidden", "heads", "layers", "seq_len", "micro_batch", "micro_batches",
                               "recompute")}
    out.update(vocab=VOCAB, iteration_s=f"{min(times):.6f}", iteration_median_s=f"{statistics.median(times):.6f}",
               iters=iters, fwd_s=f"{fwd:.6f}", bwd_s=f"{bwd:.6f}", optimizer_s=f"{o0.elapsed_time(o1) / 1e3:.6f}",
               max_memory_allocated_bytes=peak, static_memory_bytes=static,
               gpu=torch.cuda.get_device_name(), torch=torch.__version__, transformers=transformers.__version__)
    return out  # the model and optimizer die with this frame; main() collects and empties the cache


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=str(Path(__file__).with_name("configs.csv")))
    p.add_argument("--out", default=str(Path(__file__).with_name("measured_h100.csv")))
    p.add_argument("--only", default=None, help="comma-separated config names")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--time-budget", type=float, default=None, help="start no new config after S seconds")
    args = p.parse_args(argv)
    if args.iters < 8:
        p.error("--iters must be >= 8 (the protocol's minimum)")
    import torch

    if not torch.cuda.is_available():
        print("train_gptneox: CUDA is not available", file=sys.stderr)
        return 2
    with open(args.configs, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if args.only:
        keep = set(args.only.split(","))
        rows = [r for r in rows if r["name"] in keep]
    out = Path(args.out)
    done = set()
    if out.exists():
        with out.open(newline="") as fh:
            done = {r["name"] for r in csv.DictReader(fh)}
    t0 = time.monotonic()
    for row in rows:
        if row["name"] in done:
            continue
        if args.time_budget is not None and time.monotonic() - t0 > args.time_budget:
            print("time budget spent; rerun to resume", file=sys.stderr)
            break
        try:
            res = run_config(row, args.warmup, args.iters)
            gc.collect()
            torch.cuda.empty_cache()
        except torch.OutOfMemoryError:
            print(f"{row['name']}: out of memory", file=sys.stderr)
            gc.collect()
            torch.cuda.empty_cache()
            continue
        new = not out.exists() or out.stat().st_size == 0
        with out.open("a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            if new:
                w.writeheader()
            w.writerow(res)
            fh.flush()
        print(f"{res['name']}: {res['iteration_s']} s (median {res['iteration_median_s']}), fwd {res['fwd_s']}, "
              f"bwd {res['bwd_s']}, opt {res['optimizer_s']}, peak {int(res['max_memory_allocated_bytes']) / 2**30:.2f}"
              f" GiB, static {int(res['static_memory_bytes']) / 2**30:.2f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
