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
import statistics
import sys
import time


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
    layers = list(model.gpt_neox.layers)

    def tensor_mark(name: str):
        def hook(grad):
            marks[name] = time.perf_counter()
            return grad
        return hook

    def first_pre(_mod, args, kwargs):  # the hidden state entering layer 0: its gradient ends the layers' backward
        marks["f0>"] = time.perf_counter()
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.requires_grad:
            hidden.register_hook(tensor_mark("b0<"))

    def last_post(_mod, _args, _kwargs, out):  # the last layer's output: its gradient starts the layers' backward
        marks["fN<"] = time.perf_counter()
        hidden = out[0] if isinstance(out, tuple) else out
        hidden.register_hook(tensor_mark("bN>"))

    # hooks on the first and last layer only (cheap Python calls), so a layer's cost is not inflated
    layers[0].register_forward_pre_hook(first_pre, with_kwargs=True)
    layers[-1].register_forward_hook(last_post, with_kwargs=True)
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
        seg = {"head_fwd": marks["f0>"] - t0, "tail_fwd": t1 - marks["fN<"],
               "layers_fwd": marks["fN<"] - marks["f0>"], "tail_bwd": marks["bN>"] - t1,
               "head_bwd": t2 - marks["b0<"], "layers_bwd": marks["b0<"] - marks["bN>"],
               "fwd": t1 - t0, "bwd": t2 - t1}
        for k, v in seg.items():
            parts.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in parts.items()}
    layer = (med["layers_fwd"] + med["layers_bwd"]) / n
    out = {k: med[k] / layer for k in ("head_fwd", "tail_fwd", "head_bwd", "tail_bwd")}
    out.update({f"{k}_us": v * 1e6 for k, v in med.items()})
    out["layers"] = n
    out["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    out["torch"] = torch.__version__
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
