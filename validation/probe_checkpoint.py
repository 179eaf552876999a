"""What Hugging Face's gradient checkpointing costs beyond the recomputed forward, on one GPU.

For a few configurations of validation/configs_unseen4.csv (HF GPT-NeoX, the validation trainer's
model and step), trains with no recompute and with ``gradient_checkpointing_enable()`` under
three settings of ``torch.utils.checkpoint`` (HF's default, ``use_reentrant=False``,
``preserve_rng_state=False``), and reports per variant: the fastest of 8 iterations, the host's
time to issue one iteration (wall time before the final synchronisation) and its forward and
backward parts, and, from one profiled iteration, the number of CUDA runtime calls that block the
host (stream/device/event synchronisations and device-to-host copies). One JSON line per (config,
variant). ``--tiny`` runs host-bound shapes instead (hidden 256, sequence 128, micro-batch 1; 4, 8
and 16 layers; 1 and 2 micro-batches), with no recompute and HF's default only: the host's cost
per checkpointed layer and micro-batch is the slope of the difference.

    PYTHONPATH=. python validation/probe_checkpoint.py --only x05,x08 --out out/checkpoint.jsonl
    PYTHONPATH=. python validation/probe_checkpoint.py --tiny --out out/checkpoint_tiny.jsonl
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = {"none": None, "hf_default": {}, "non_reentrant": {"use_reentrant": False},
            "reentrant_no_rng": {"use_reentrant": True, "preserve_rng_state": False}}
BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
            "cudaMemcpyAsync")


def run(torch, row: dict, variant: str, iters: int = 8) -> dict:
    from train_hf_parallel import Shape, build_model

    d, h, n = int(row["hidden"]), int(row["heads"]), int(row["layers"])
    l, b, m = int(row["seq_len"]), int(row["micro_batch"]), int(row["micro_batches"])
    dev = torch.device("cuda")
    model = build_model(torch, Shape(row["name"], d, h, n, l, b, m), 50432, dev)
    kw = VARIANTS[variant]
    if kw is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw or None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device=dev).manual_seed(1)
    xs = [torch.randint(0, 50432, (b, l), device=dev, generator=gen) for _ in range(m)]

    def iteration() -> tuple[float, float]:
        """Host seconds spent in the forwards and in the backwards (no synchronisation inside)."""
        f = bw = 0.0
        for x in xs:
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            t1 = time.perf_counter()
            loss.backward()
            f, bw = f + t1 - t0, bw + time.perf_counter() - t1
        opt.step()
        opt.zero_grad(set_to_none=True)
        return f, bw

    for _ in range(3):
        iteration()
    torch.cuda.synchronize()
    times, issue, fwd_issue, bwd_issue = [], [], [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        f, bw = iteration()
        issue.append(time.perf_counter() - t0)
        fwd_issue.append(f)
        bwd_issue.append(bw)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        iteration()
        torch.cuda.synchronize()
    counts: dict[str, int] = {}
    for e in prof.events():
        if e.name in BLOCKING:
            counts[e.name] = counts.get(e.name, 0) + 1
    gpu_busy = sum(e.device_time for e in prof.events() if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA")) / 1e6
    out = {"name": row["name"], "variant": variant, "layers": n, "micro_batches": m, "min_s": min(times),
           "median_s": sorted(times)[len(times) // 2], "issue_s_min": min(issue),
           "issue_fwd_s_min": min(fwd_issue), "issue_bwd_s_min": min(bwd_issue), "blocking_calls": counts,
           "kernel_s": gpu_busy, "gpu": torch.cuda.get_device_name()}
    return out  # the model dies with this frame; main() collects and empties the cache


def main() -> None:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--configs", default=str(Path(__file__).with_name("configs_unseen4.csv")))
    p.add_argument("--only", default="x05,x08,x03")
    p.add_argument("--out", required=True)
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args()
    rows = {r["name"]: r for r in csv.DictReader(open(args.configs))}
    variants = list(VARIANTS)
    if args.tiny:
        rows = {f"t{n}m{m}": {"name": f"t{n}m{m}", "hidden": "256", "heads": "4", "layers": str(n), "seq_len": "128",
                              "micro_batch": "1", "micro_batches": str(m)} for n in (4, 8, 16) for m in (1, 2)}
        args.only = ",".join(rows)
        variants = ["none", "hf_default"]
    with open(args.out, "a") as f:
        for name in args.only.split(","):
            for variant in variants:
                r = run(torch, rows[name], variant)
                gc.collect()
                torch.cuda.empty_cache()
                f.write(json.dumps(r) + "\n")
                f.flush()
                print(f"{name} {variant:17} min {r['min_s']:.4f} s  issue {r['issue_s_min']:.4f} s (fwd "
                      f"{r['issue_fwd_s_min']:.4f}, bwd {r['issue_bwd_s_min']:.4f})  kernels "
                      f"{r['kernel_s']:.4f} s  blocking {r['blocking_calls']}", flush=True)


if __name__ == "__main__":
    main()
