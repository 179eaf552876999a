"""The host time of a Hugging Face GPT-NeoX micro-batch outside its layers, in layers.

The eager runtime's host-GPU flow shop (``sim/costs.py`` ``issue_flow_shop``) spreads the fitted
per-layer host line over the operators a micro-batch issues. The model's head (embedding, the
causal-mask construction that synchronises host and GPU, the rotary tables) and tail (final norm,
LM head, loss) are not layers, and after the synchronisation the GPU waits for the head's host
work. This probe times, at a tiny shape where every operator is host-bound, the host's seconds in
each part of the forward (hooks on the first and last layer) and of the backward (gradient hooks
on the hidden state entering the first layer and leaving the last), and prints them in units of
one layer's forward and backward::

    PYTHONPATH=. python validation/probe_head_host.py [--device cuda] [--layers 8] [--iters 60]

One JSON line: ``head_fwd``, ``tail_fwd``, ``head_bwd``, ``tail_bwd`` (each part's host time over
a layer's forward plus backward host time), the raw medians in microseconds, and the device.
The workload is validation/train_gptneox.py's model (bf16 autocast on CUDA) at hidden 128,
sequence 64, one sequence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_parallel_head_host import in_layers, install_marks, split  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args(argv)

    import contextlib

    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    dev = torch.device(args.device)
    n = args.layers
    cfg = GPTNeoXConfig(hidden_size=128, num_attention_heads=4, num_hidden_layers=n, intermediate_size=512,
                        vocab_size=50432, max_position_embeddings=2048)
    cfg._attn_implementation = "sdpa"
    model = GPTNeoXForCausalLM(cfg).to(dev)
    x = torch.randint(0, cfg.vocab_size, (1, 64), device=dev)
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if dev.type == "cuda" else contextlib.nullcontext
    marks: dict[str, float] = {}
    # hooks on the first and last layer only (cheap Python calls), so a layer's cost is not inflated
    install_marks(model, marks)
    parts: dict[str, list[float]] = {}
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for it in range(args.warmup + args.iters):
        marks.clear()
        sync()
        t0 = time.perf_counter()
        with amp():
            loss = model(input_ids=x, labels=x).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        sync()
        if it < args.warmup:
            continue
        for k, v in {**split(marks, t0, t1, t2), "fwd": t1 - t0, "bwd": t2 - t1}.items():
            parts.setdefault(k, []).append(v)
    out = in_layers(parts, n)
    out["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    out["torch"] = torch.__version__
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
