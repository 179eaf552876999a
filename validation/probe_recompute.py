"""Probe: what does HF's gradient checkpointing recompute? (run on the GPU machine)

Times one micro-batch's backward of a checkpointed GPT-NeoX with PyTorch's
non-reentrant early stop on (the default) and off, and counts GEMM kernels in the
backward with the profiler. If the recompute stops early, the backward with early
stop off is slower by about one dense_4h_to_h GEMM and one residual add per layer.
"""

from __future__ import annotations

import sys

import torch
import torch.utils.checkpoint as ckpt
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM


def main() -> int:
    d, h, n, l, b = (int(x) for x in (sys.argv[1:6] if len(sys.argv) > 5 else (5120, 40, 4, 1024, 8)))
    cfg = GPTNeoXConfig(vocab_size=50432, hidden_size=d, num_hidden_layers=n, num_attention_heads=h,
                        intermediate_size=4 * d, max_position_embeddings=max(l, 2048), hidden_dropout=0.0,
                        attention_dropout=0.0, use_cache=False, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = GPTNeoXForCausalLM(cfg)
    model.gradient_checkpointing_enable()
    layer = model.gpt_neox.layers[0]
    fn = getattr(layer, "_gradient_checkpointing_func", None)
    print("checkpoint func:", getattr(fn, "func", fn), getattr(fn, "keywords", None))
    x = torch.randint(0, 50432, (b, l), device="cuda")

    def bwd_ms(early: bool, reps: int = 5) -> float:
        out = []
        for _ in range(reps):
            with ckpt.set_checkpoint_early_stop(early):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x).loss
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                loss.backward()
                e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e))
            model.zero_grad(set_to_none=True)
        return sorted(out)[len(out) // 2]

    bwd_ms(True, 2)
    on, off = bwd_ms(True), bwd_ms(False)
    print(f"backward per micro-batch: early stop on {on:.2f} ms, off {off:.2f} ms, difference {off - on:.2f} ms "
          f"({(off - on) / n:.3f} ms per layer)")
    for early in (True, False):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        with ckpt.set_checkpoint_early_stop(early), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            loss.backward()
            torch.cuda.synchronize()
        names = [ev.name for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA]
        gemm = sum(1 for nm in names if any(k in nm.lower() for k in ("gemm", "nvjet", "sm90_xmma", "cutlass")))
        print(f"early stop {early}: {len(names)} kernels in backward, {gemm} GEMM-like")
        model.zero_grad(set_to_none=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
