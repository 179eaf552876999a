"""Micro-benchmarks of the fused kinds (``training.kernels: fused``): one generated kernel per operator.

Megatron-Core with Transformer Engine runs RoPE, SwiGLU and the FP8 scaled cast (with the
transposed copy Hopper's FP8 GEMMs need) as hand-fused CUDA kernels; the eager kinds (``rope``,
``swiglu``, ``fp8_cast``) are the PyTorch eager sequences, several kernels and passes over memory
each. Transformer Engine is not on the lent machines, so the fused kinds are the same mathematics
compiled by ``torch.compile`` (Inductor's Triton kernels): one pass over the tensor where the
mathematics allows one, more where it needs a global reduction first (the FP8 cast's amax, as TE's
current scaling does). That is a stand-in, not TE itself; docs/published.md says so and by how much
the two kinds differ.

``fused_softmax`` is Megatron's own fused kernel (``scaled_upper_triang_masked_softmax``, in every
Megatron since 2019, the kind the reference samples measured): scale, causal mask and softmax in
one pass, the mask computed from the indices. Its apex/Megatron extension is not on the lent
machines either, so it is compiled here the same way (the PyTorch sequence it replaces, three
kernels and a mask tensor, ran 3.6-7.3 times slower than the measured A100 and GH200 kernels).

Every function compiled here takes all its tensors as arguments (no captured tensor) and Dynamo's
recompile limit is raised, so that a new shape never falls back to eager silently. Each shape is
compiled for itself (static shapes), as a hand-written kernel is specialised: a dynamic-shape RoPE
kernel ran at 0.86 or 1.48 TB/s on an H100 depending on which shapes the process had compiled
before, the static one at 2.4-3.0 TB/s (validation/fused_kernels_h100/). Compilation happens in
the bench's untimed warm-up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainsim.operators.ops import UNFUSED_OF, Direction, Op, OpKind

#: the kinds whose bench is a compiled function here: the fused kinds and Megatron's one-kernel softmax
COMPILED_KINDS = frozenset((*UNFUSED_OF, OpKind.FUSED_SOFTMAX))
_COMPILED: dict[str, Callable[..., Any]] = {}
RECOMPILE_LIMIT = 4096


def _compiled(env: Any, name: str, fn: Callable[..., Any], options: dict[str, Any] | None = None) -> Callable[..., Any]:
    if name not in _COMPILED:
        torch = env.torch
        cfg = torch._dynamo.config
        for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                    "accumulated_recompile_limit"):
            if hasattr(cfg, key):
                setattr(cfg, key, RECOMPILE_LIMIT)
        # the backward bench replays one graph (retain_graph): no buffer may be donated
        if hasattr(torch._functorch.config, "donated_buffer"):
            torch._functorch.config.donated_buffer = False
        _COMPILED[name] = torch.compile(fn, dynamic=False, fullgraph=True, options=options)
        env.notes.setdefault("fused", f"torch.compile (Inductor) {torch.__version__}, static shapes "
                                      "(one compile per shape)")
    return _COMPILED[name]


def _rope(q: Any, k: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    import torch

    def rotate(x: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def _swiglu(x: Any) -> Any:
    import torch.nn.functional as F

    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def _masked_softmax(s: Any, scale: float) -> Any:
    import torch

    rows = torch.arange(s.shape[-2], device=s.device)[:, None]
    cols = torch.arange(s.shape[-1], device=s.device)[None, :]
    return torch.softmax((s * scale).masked_fill(cols > rows, float("-inf")), dim=-1)


def fused_body(op: Op, env: Any) -> tuple[Callable[[], dict], Callable[[dict], Any], bool]:
    """(make one input set, forward, runs under autocast) of an autograd fused kind, as
    :func:`trainsim.calibration.harness._body` returns for the eager kinds (same shapes)."""
    torch = env.torch
    k, b, l, d, h, mp, f = op.kind, op.b, op.l, op.d, op.h, op.mp, op.ffn
    hd = d // h if h else d
    hp = max(h // mp, 1)
    r = env.randn
    if k is OpKind.ROPE_FUSED:  # [l, b, h/mp, head_dim] q and k, Megatron's layout
        pos = torch.arange(l, device=env.device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=env.device, dtype=torch.float32) / hd))
        emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)[:, None, None, :]
        cos, sin = emb.cos().to(env.dtype), emb.sin().to(env.dtype)
        fn = _compiled(env, "rope", _rope)
        return (lambda: {"q": r(l, b, hp, hd, grad=True), "k": r(l, b, hp, hd, grad=True), "cos": cos, "sin": sin},
                lambda t: fn(t["q"], t["k"], t["cos"], t["sin"]), False)
    if k is OpKind.SWIGLU_FUSED:
        fn = _compiled(env, "swiglu", _swiglu)
        return lambda: {"x": r(b * l, 2 * (f // mp), grad=True)}, lambda t: fn(t["x"]), False
    if k is OpKind.FUSED_SOFTMAX:  # [b*h/mp, l, l] attention scores, as the reference harness shapes them
        # Inductor keeps a row in registers (a persistent reduction, as Megatron's kernel does for rows
        # up to 16384) only up to 1,024 columns by default and loops over longer rows, re-reading
        # them (0.8-1.5 TB/s on an H100 against 2.9 at 1,024: validation/fused_kernels_h100/softmax);
        # multi_kernel compiles both and keeps the faster one, measured at the first call
        fn = _compiled(env, "masked_softmax", _masked_softmax, options={"triton.multi_kernel": 1})
        return lambda: {"s": r(b * hp, l, l, grad=True)}, lambda t: fn(t["s"], hd ** -0.5), False
    raise AssertionError(k)


def _cast_transpose(x: Any, fmax: Any, fmt: Any) -> tuple[Any, Any]:
    scale = fmax / x.abs().amax().float().clamp(min=1e-12)
    q = (x.float() * scale).clamp(-fmax, fmax).to(fmt)
    return q, q.t().contiguous()


def fused_cast_fn(env: Any, direction: Direction) -> Callable[[Any, Any], Any]:
    """The compiled FP8 scaled cast of ``direction`` (forward e4m3, backward e5m2) as Transformer
    Engine runs it on Hopper: the amax, then the cast with its transposed copy (an FP8 GEMM there
    takes only the TN layout, so every FP8 operand is kept both ways: ``cast_transpose``). Inductor
    emits the reduction, the cast and the transpose."""
    torch = env.torch
    fmt = torch.float8_e4m3fn if direction is Direction.FWD else torch.float8_e5m2
    fn = _compiled(env, f"fp8_cast_transpose_{direction.value}", _cast_transpose)
    return lambda x, fmax: fn(x, fmax, fmt)
