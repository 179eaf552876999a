"""Operator micro-benchmarks: time each operator a stage plan uses, forward and backward.

Protocol (method.md, "Profiling protocol", and the device's METHOD.md):

* random inputs (never zeros), drawn from one seeded generator per sample;
* ``warmup`` untimed runs, then ``iters`` timed runs, each bracketed by CUDA events
  (``time.perf_counter`` on the CPU);
* the figure kept is the mean of the middle five of the sorted samples
  (:func:`robust_mean`), the paper's statistic;
* when one input set (activations and weights) is smaller than twice the L2 cache,
  the timed runs rotate over several independent input sets so that each run
  starts from a cold cache, as inside a real model.

The backward of an operator is timed as ``torch.autograd.grad`` of its output over a
graph recorded once per input set (``retain_graph``): the gradient kernels alone,
without the forward and without accumulation into ``.grad`` (that is the separate
``hf_grad_accum`` operator). Shapes are the per-MP-rank shapes of an :class:`Op`,
so an mp > 1 shape is measured on one GPU, as the paper does.

The FP8 kinds (``fp8_linear1..4``, ``fp8_cast``) are not autograd graphs: Transformer Engine's
GEMMs are ``torch._scaled_mm`` calls on operands already in FP8 (the casts are ``fp8_cast``,
priced separately), forward one GEMM, backward the two (dgrad and wgrad); see :func:`_fp8_bench`.
They need a CUDA GPU of compute capability 8.9+ (:func:`fp8_unsupported`).

torch is imported lazily: ``import calibration`` works without it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainsim.calibration.harness_fused import COMPILED_KINDS, fused_body
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import FP8_CAST_KINDS, FP8_OF, Direction, Op, OpKind, hf_params
from trainsim.operators.partition import padded_vocab

L2_BYTES_DEFAULT = 50 * 2**20  # H100 SXM
WARMUP = 10
ITERS = 10
HF_ROTARY_PCT = 0.25  # GPTNeoXConfig's default partial rotary


class TorchUnavailable(RuntimeError):
    """torch (or CUDA) is missing for what was asked."""


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise TorchUnavailable("PyTorch is not installed; install it (pip install torch) to calibrate") from e
    return torch


def robust_mean(samples: Sequence[float], keep: int = 5) -> float:
    """Mean of the middle ``keep`` values of the sorted samples (all of them when fewer).

    With an even surplus the window is centred; with 10 samples it drops the two lowest
    and the three highest (slow outliers are the usual kind).
    """
    if not samples:
        raise ValueError("no samples")
    xs = sorted(samples)
    if len(xs) <= keep:
        return sum(xs) / len(xs)
    lo = (len(xs) - keep) // 2
    mid = xs[lo:lo + keep]
    return sum(mid) / len(mid)


@dataclass
class Bench:
    """One operator ready to run: ``run(i)`` executes it on input set ``i``."""

    run: Callable[[int], Any]
    sets: int
    bytes_per_set: int
    before: Callable[[int], None] | None = None  # untimed preparation before each run


@dataclass
class Env:
    torch: Any
    device: Any
    dtype: Any  # the half type of the run (bf16 or fp16)
    gen: Any
    l2_bytes: int = L2_BYTES_DEFAULT
    keep: list = field(default_factory=list)
    # FP8 kinds: None detects (CUDA, compute capability 8.9+, torch's float8 types and _scaled_mm);
    # True forces them (the CPU tests run the bodies on CPU _scaled_mm), False refuses them
    fp8: bool | None = None
    notes: dict = field(default_factory=dict)  # implementation choices recorded into meta.json
    # GPU time only (issue 9/12): before the timed runs a sleep kernel holds the GPU while the CPU
    # queues them all, so each event pair brackets kernels alone, as in training, where the CPU runs
    # ahead of the GPU; without it a launch-bound operator's events time its CPU launches. The host's
    # own cost is priced separately (calibration.host_overhead). 0: the old protocol.
    cpu_ahead: bool = False
    sleep_cycles_per_ms: float = 0.0

    def randn(self, *shape: int, dtype=None, grad: bool = False, scale: float = 1.0):
        # drawn on the device itself: a CPU draw of a 2-billion-parameter optimizer state takes minutes
        t = self.torch.randn(tuple(shape), generator=self.gen, device=self.device, dtype=self.torch.float32)
        if scale != 1.0:
            t.mul_(scale)
        t = t.to(dtype=dtype or self.dtype)
        return t.requires_grad_(grad)

    def randint(self, high: int, *shape: int):
        return self.torch.randint(0, high, tuple(shape), generator=self.gen, device=self.device)

    def autocast(self):
        return self.torch.autocast(device_type=self.device.type, dtype=self.dtype)


def _nbytes(ts: Iterable) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _sets_for(nbytes: int, l2: int) -> int:
    """Input sets to rotate: enough that the working set exceeds twice L2 (at least 2, at most 8)."""
    if nbytes >= 2 * l2:
        return 1
    return max(2, min(8, math.ceil(2 * l2 / max(nbytes, 1))))


# ----------------------------------------------------------------------------- operator bodies
# Each body maker returns (make_inputs(env) -> (tensors requiring grad, extra), fwd(inputs) -> output)
# ``make`` builds one input set; ``fwd`` runs the operator on it.


def _causal_mask(env: Env, l: int):
    return env.torch.triu(env.torch.ones(l, l, dtype=env.torch.bool, device=env.device), diagonal=1)


def _rotate_half(torch, x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _body(op: Op, env: Env) -> tuple[Callable[[], dict], Callable[[dict], Any], bool]:
    """(make one input set, forward, runs under autocast)."""
    torch = env.torch
    F = torch.nn.functional
    k, b, l, d, h, mp, v, f = op.kind, op.b, op.l, op.d, op.h, op.mp, op.v, op.ffn
    if k in COMPILED_KINDS:
        return fused_body(op, env)
    hd = d // h if h else d
    hp = max(h // mp, 1)
    dt = env.dtype
    fp32 = torch.float32
    r = env.randn

    def linear(k_in: int, n_out: int, bias: bool = True, in_dtype=dt, w_dtype=dt):
        def make():
            return {"x": r(b * l, k_in, dtype=in_dtype, grad=True),
                    "w": r(n_out, k_in, dtype=w_dtype, grad=True, scale=k_in ** -0.5),
                    **({"b": r(n_out, dtype=w_dtype, grad=True, scale=0.02)} if bias else {})}
        return make, lambda t: F.linear(t["x"], t["w"], t.get("b")), w_dtype is fp32

    if k is OpKind.EMBEDDING or k is OpKind.HF_EMBEDDING:
        rows, wdt = (v // mp, dt) if k is OpKind.EMBEDDING else (v // mp, fp32)
        return (lambda: {"ids": env.randint(rows, b, l), "w": r(rows, d, dtype=wdt, grad=True, scale=0.02)},
                lambda t: F.embedding(t["ids"], t["w"]), False)
    if k in (OpKind.LAYERNORM, OpKind.HF_LAYERNORM):
        xdt = dt if k is OpKind.LAYERNORM else fp32
        return (lambda: {"x": r(b, l, d, dtype=xdt, grad=True), "w": r(d, dtype=xdt, grad=True),
                         "b": r(d, dtype=xdt, grad=True)},
                lambda t: F.layer_norm(t["x"], (d,), t["w"], t["b"], 1e-5), k is OpKind.HF_LAYERNORM)
    if k is OpKind.RMSNORM:
        return (lambda: {"x": r(b, l, d, grad=True), "w": r(d, grad=True)},
                lambda t: F.rms_norm(t["x"], (d,), t["w"], 1e-5), False)
    if k in GEMM_KINDS:  # Megatron's column- and row-parallel linears at one rank
        return linear(*gemm_dims(op)[1:])
    if k is OpKind.LINEAR_FINAL:
        return linear(d, v // mp, bias=False)
    # hf kinds at mp > 1: one rank's shard under PyTorch's DTensor Megatron plan (operators.ops)
    if k is OpKind.HF_QKV:
        return linear(d, 3 * d // mp, in_dtype=fp32, w_dtype=fp32)
    if k is OpKind.HF_DENSE:
        return linear(d // mp, d, in_dtype=dt, w_dtype=fp32)
    if k is OpKind.HF_MLP_UP:
        return linear(d, f // mp, in_dtype=fp32, w_dtype=fp32)
    if k is OpKind.HF_MLP_DOWN:
        return linear(f // mp, d, in_dtype=dt, w_dtype=fp32)
    if k is OpKind.HF_LM_HEAD:
        return linear(d, v // mp, bias=False, in_dtype=fp32, w_dtype=fp32)
    if k is OpKind.HF_WEIGHT_CAST:  # autocast's cached_cast of a leaf fp32 weight
        return (lambda: {"w": r(f // mp, d, dtype=fp32, grad=True, scale=d ** -0.5)},
                lambda t: t["w"].to(dt), False)
    if k is OpKind.ROPE:  # Megatron's rotary on q and k, [l, b, h/mp, head_dim]
        pos = torch.arange(l, device=env.device, dtype=fp32)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=env.device, dtype=fp32) / hd))
        emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)[:, None, None, :]
        cos, sin = emb.cos().to(dt), emb.sin().to(dt)

        def rope(t):
            return tuple(x * cos + _rotate_half(torch, x) * sin for x in (t["q"], t["k"]))
        return (lambda: {"q": r(l, b, hp, hd, grad=True), "k": r(l, b, hp, hd, grad=True)}, rope, False)
    if k is OpKind.BADDBMM:
        return (lambda: {"q": r(b * hp, l, hd, grad=True), "k": r(b * hp, hd, l, grad=True)},
                lambda t: torch.baddbmm(torch.empty(b * hp, l, l, dtype=dt, device=env.device),
                                        t["q"], t["k"], beta=0.0, alpha=hd ** -0.5), False)
    if k is OpKind.ATTN_DROPOUT:  # torch.nn.Dropout(0.1) on the probabilities, as Megatron's CoreAttention
        return (lambda: {"p": r(b * hp, l, l, grad=True, scale=1.0 / l)},
                lambda t: F.dropout(t["p"], p=0.1, training=True), False)
    if k is OpKind.FILLMASK:
        mask = _causal_mask(env, l)
        return (lambda: {"s": r(b, hp, l, l, grad=True)}, lambda t: t["s"].masked_fill(mask, -10000.0), False)
    if k is OpKind.SOFTMAX:
        return (lambda: {"s": r(b, hp, l, l, grad=True)}, lambda t: torch.softmax(t["s"], dim=-1), False)
    if k is OpKind.BMM:
        return (lambda: {"p": r(b * hp, l, l, grad=True, scale=1.0 / l), "v": r(b * hp, l, hd, grad=True)},
                lambda t: torch.bmm(t["p"], t["v"]), False)
    if k is OpKind.FLASH_ATTN:
        return (lambda: {n: r(b, hp, l, hd, grad=True) for n in "qkv"},
                lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True), False)
    if k is OpKind.GELU:
        return lambda: {"x": r(b, l, f // mp, grad=True)}, lambda t: F.gelu(t["x"]), False
    if k is OpKind.SWIGLU:  # Megatron's (unfused) swiglu: the fused gate-and-up output halved
        def swiglu(t):
            gate, up = t["x"].chunk(2, dim=-1)
            return F.silu(gate) * up
        return lambda: {"x": r(b * l, 2 * (f // mp), grad=True)}, swiglu, False
    if k is OpKind.RES_ADD:
        return lambda: {"x": r(b, l, d, grad=True), "y": r(b, l, d, grad=True)}, lambda t: t["x"] + t["y"], False
    if k is OpKind.HF_RESIDUAL:
        return (lambda: {"m": r(b, l, d, grad=True), "a": r(b, l, d, grad=True),
                         "x": r(b, l, d, dtype=fp32, grad=True)},
                lambda t: t["m"] + t["a"] + t["x"], True)
    if k is OpKind.CROSS_ENTROPY:  # vocab-parallel cross-entropy at one rank: fp32 softmax over v/mp
        return (lambda: {"z": r(b * l, v // mp, grad=True), "y": env.randint(v // mp, b * l)},
                lambda t: F.cross_entropy(t["z"].float(), t["y"]), False)
    if k is OpKind.HF_LOSS:  # transformers' ForCausalLMLoss; at mp > 1 one rank's v / mp logits
        vp = v // mp

        def loss(t):
            logits = t["z"].float()
            labels = F.pad(t["y"], (0, 1), value=-100)[..., 1:].contiguous()
            return F.cross_entropy(logits.view(-1, vp), labels.view(-1), ignore_index=-100)
        return lambda: {"z": r(b, l, vp, grad=True), "y": env.randint(vp, b, l)}, loss, True
    if k is OpKind.HF_ATTENTION:
        rot = int(hd * HF_ROTARY_PCT)
        pos = torch.arange(l, device=env.device, dtype=fp32)
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=env.device, dtype=fp32) / rot))
        emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)[None, None].expand(b, 1, l, rot)
        cos, sin = emb.cos(), emb.sin()  # fp32: HF casts them to the (fp32) hidden states' dtype

        def attention(t):  # h / mp heads on one tensor-parallel rank (hp)
            qkv = t["qkv"].view(b, l, hp, 3 * hd).transpose(1, 2)
            q, kk, vv = qkv.chunk(3, dim=-1)
            out = []
            for x in (q, kk):
                x_rot, x_pass = x[..., :rot], x[..., rot:]
                out.append(torch.cat([x_rot * cos + _rotate_half(torch, x_rot) * sin, x_pass], dim=-1))
            a = F.scaled_dot_product_attention(out[0], out[1], vv, is_causal=True, scale=hd ** -0.5)
            return a.transpose(1, 2).contiguous().reshape(b, l, hp * hd).contiguous()
        return lambda: {"qkv": r(b, l, 3 * hp * hd, grad=True)}, attention, True
    raise ConfigError("ops", f"no micro-benchmark for operator {k.value!r}")


def _tensors(t: dict) -> list:
    return [x for x in t.values() if hasattr(x, "requires_grad")]


def _kernel_bench(op: Op, direction: Direction, env: Env) -> Bench:
    make, fwd, autocast = _body(op, env)
    return autograd_bench(make, fwd, direction, env, autocast)


def autograd_bench(make: Callable[[], dict], fwd: Callable[[dict], Any], direction: Direction, env: Env,
                   autocast: bool = False, output_grad: Callable[[tuple], tuple] | None = None) -> Bench:
    """The forward, or the backward (``torch.autograd.grad`` over a graph recorded once per input
    set), of ``fwd`` on input sets built by ``make`` (its tensors that require grad are the ones
    differentiated), rotated as the module doc says. ``output_grad`` seeds the backward from the
    outputs; by default a loss (a scalar) gets the 1.0 that ``loss.backward()`` seeds and other
    outputs a random gradient."""
    torch = env.torch
    first = make()
    sets = [first] + [make() for _ in range(_sets_for(_nbytes(_tensors(first)), env.l2_bytes) - 1)]
    nbytes = _nbytes(_tensors(first))

    def forward(t):
        if autocast:
            with env.autocast():
                return fwd(t)
        return fwd(t)

    if direction is Direction.FWD:
        def run_fwd(i):
            with torch.enable_grad():
                return forward(sets[i])
        return Bench(run_fwd, len(sets), nbytes)

    graphs = []
    for t in sets:
        with torch.enable_grad():
            out = forward(t)
        outs = out if isinstance(out, tuple) else (out,)
        grads = (output_grad(outs) if output_grad is not None else
                 tuple(torch.ones_like(o) if o.dim() == 0 else env.randn(*o.shape, dtype=o.dtype) for o in outs))
        wrt = [x for x in _tensors(t) if x.requires_grad]
        graphs.append((outs, wrt, grads))

    def run_bwd(i):
        outs, wrt, grads = graphs[i]
        return torch.autograd.grad(outs, wrt, grads, retain_graph=True)
    return Bench(run_bwd, len(graphs), nbytes)


# ----------------------------------------------------------------------------- FP8 kinds (Transformer Engine)

GEMM_KINDS = (OpKind.LINEAR1, OpKind.LINEAR2, OpKind.LINEAR3, OpKind.LINEAR4)
FP8_GEMM_KINDS = tuple(FP8_OF[k] for k in GEMM_KINDS)
FP8_KINDS = FP8_GEMM_KINDS + FP8_CAST_KINDS
_BF16_GEMM = {fp8: bf16 for bf16, fp8 in FP8_OF.items()}
E4M3_MAX = 448.0  # largest float8_e4m3fn
E5M2_MAX = 57344.0  # largest float8_e5m2
FP8_ALIGN = 16  # _scaled_mm (cuBLASLt FP8) needs every GEMM dimension a multiple of 16


def gemm_dims(op: Op) -> tuple[int, int, int]:
    """(tokens, k, n) of an encoder GEMM kind (bf16 or FP8) on one rank: [tokens, k] x [k, n]."""
    d, mp, f = op.d, op.mp, op.ffn
    k = _BF16_GEMM.get(op.kind, op.kind)
    kn = {OpKind.LINEAR1: (d, op.qkv // mp), OpKind.LINEAR2: (d // mp, d), OpKind.LINEAR3: (d, f // mp),
          OpKind.LINEAR4: (f // mp, d)}[k]
    return (op.b * op.l, *kn)


def _up16(n: int) -> int:
    return -(-n // FP8_ALIGN) * FP8_ALIGN


def fp8_gemm_operands(op: Op, direction: Direction) -> dict[str, tuple[tuple[int, ...], str]]:
    """The operands (shape, dtype name) of one FP8 GEMM bench, every row-major as stored.

    Dimensions are rounded up to multiples of 16 (the sampling plan's shapes already are). Forward:
    ``x [T, K] e4m3 @ w [N, K]^T e4m3 + bias -> [T, N]``. Backward, the two GEMMs of Transformer
    Engine on Hopper (FP8 GEMMs take only the TN layout, so it keeps transposed FP8 copies, made by
    its fused cast-transpose): dgrad ``g [T, N] e5m2 @ w_t [K, N]^T e4m3 -> [T, K]`` and wgrad
    ``g_t [N, T] e5m2 @ x_t [K, T]^T e4m3 -> [N, K]``.
    """
    t, k, n = (_up16(x) for x in gemm_dims(op))
    e4, e5 = "float8_e4m3fn", "float8_e5m2"
    if direction is Direction.FWD:
        return {"x": ((t, k), e4), "w": ((n, k), e4), "bias": ((n,), "half")}
    return {"g": ((t, n), e5), "w_t": ((k, n), e4), "g_t": ((n, t), e5), "x_t": ((k, t), e4)}


def fp8_unsupported(env: Env) -> str | None:
    """Why the FP8 kinds cannot be measured in ``env`` (None: they can)."""
    torch = env.torch
    if env.fp8 is False:
        return "FP8 is switched off for this run"
    missing = [n for n in ("float8_e4m3fn", "float8_e5m2", "_scaled_mm") if not hasattr(torch, n)]
    if missing:
        return f"torch {torch.__version__} has no " + ", ".join(f"torch.{n}" for n in missing)
    if env.fp8:
        return None
    if env.device.type != "cuda":
        return f"they need a CUDA GPU of compute capability 8.9 or newer (Ada, Hopper), not {env.device.type}"
    major, minor = torch.cuda.get_device_capability(env.device)
    if (major, minor) < (8, 9):
        return (f"they need a CUDA GPU of compute capability 8.9 or newer (Ada, Hopper); "
                f"{torch.cuda.get_device_name(env.device)} is {major}.{minor}")
    return None


def require_fp8(env: Env, kinds: Iterable[OpKind]) -> None:
    """Raise a ConfigError naming --ops when ``kinds`` hold FP8 kinds that ``env`` cannot run."""
    asked = sorted({k.value for k in kinds if k in FP8_KINDS})
    if not asked:
        return
    why = fp8_unsupported(env)
    if why:
        raise ConfigError("--ops", f"cannot measure {', '.join(asked)} here: {why}; leave the fp8_* kinds out")


def _scaled_mm(torch, a, b, scale_a, scale_b, out_dtype, bias=None, fast: bool = False):
    out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                           use_fast_accum=fast)
    return out[0] if isinstance(out, tuple) else out  # torch < 2.4 also returned the amax


def _fp8_bench(op: Op, direction: Direction, env: Env) -> Bench:
    """An FP8 kind: its operands are made (and quantized) untimed; a run is the GEMM(s) or the cast.

    Forward GEMMs use fast accumulation and the backward ones split accumulation, Transformer
    Engine's defaults (``use_split_accumulator`` False for fprop, True for dgrad and wgrad). The
    outputs, dgrad and wgrad included, are in the run's half type. A cast is Transformer Engine's
    current scaling: the absolute maximum, the scale (format maximum / amax), the scaled cast.
    """
    require_fp8(env, (op.kind,))
    torch = env.torch
    dev = env.device
    f32 = torch.float32
    if op.kind in FP8_CAST_KINDS:
        return _fp8_cast_bench(op, direction, env)
    names = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "half": env.dtype}
    operands = fp8_gemm_operands(op, direction)

    def make() -> dict:
        t = {}
        for name, (shape, dt) in operands.items():
            scale = 0.02 if name == "bias" else 1.0
            t[name] = env.randn(*shape, dtype=names[dt], scale=scale)
        return t

    first = make()
    nbytes = _nbytes(first.values())
    sets = [first] + [make() for _ in range(_sets_for(nbytes, env.l2_bytes) - 1)]
    # per-tensor dequantization scales (Transformer Engine's scale_inv: amax / format maximum)
    s_x, s_w, s_g = (torch.full((), v, dtype=f32, device=dev) for v in (4.0 / E4M3_MAX, 4.0 / E4M3_MAX,
                                                                         4.0 / E5M2_MAX))
    out = env.dtype

    if direction is Direction.FWD:
        def fprop(i):
            t = sets[i]
            return _scaled_mm(torch, t["x"], t["w"].t(), s_x, s_w, out, bias=t["bias"], fast=True)
        return Bench(fprop, len(sets), nbytes)

    def dgrad_wgrad(i):
        t = sets[i]
        dgrad = _scaled_mm(torch, t["g"], t["w_t"].t(), s_g, s_w, out)
        wgrad = _scaled_mm(torch, t["g_t"], t["x_t"].t(), s_g, s_x, out)
        return dgrad, wgrad
    return Bench(dgrad_wgrad, len(sets), nbytes)


def _fp8_cast_bench(op: Op, direction: Direction, env: Env) -> Bench:
    """``fp8_cast``: a bf16 [b*l, d] tensor to float8_e4m3fn (forward: GEMM inputs) or float8_e5m2
    (backward: output gradients) with a per-tensor scale: ``amax = max |x|`` (one reduction),
    ``scale = fmax / amax``, then the scaled cast, written straight into FP8 (``torch.mul`` with an
    FP8 ``out=``; where torch cannot, ``(x * scale).to(fp8)``, noted in meta.json)."""
    torch = env.torch
    fmt, fmax = ((torch.float8_e4m3fn, E4M3_MAX) if direction is Direction.FWD
                 else (torch.float8_e5m2, E5M2_MAX))
    rows, width = op.b * op.l, op.d
    fmax_t = torch.full((), fmax, dtype=torch.float32, device=env.device)
    inf = float("inf")

    def make() -> dict:
        return {"x": env.randn(rows, width), "q": torch.empty(rows, width, dtype=fmt, device=env.device)}

    def fused(t):
        scale = torch.div(fmax_t, torch.linalg.vector_norm(t["x"], inf))
        return torch.mul(t["x"], scale, out=t["q"])

    def two_step(t):
        scale = torch.div(fmax_t, torch.linalg.vector_norm(t["x"], inf))
        return (t["x"] * scale).to(fmt)

    first = make()
    if "fp8_cast" not in env.notes:
        try:
            fused(first)
            env.notes["fp8_cast"] = "vector_norm(inf), div, mul(out=float8)"
        except (RuntimeError, TypeError):
            env.notes["fp8_cast"] = "vector_norm(inf), div, mul, to(float8)"
    cast: Callable[[dict], Any] = fused if "out=" in env.notes["fp8_cast"] else two_step
    if op.kind is OpKind.FP8_CAST_FUSED:  # compiled: the amax, the cast and its transposed copy
        from trainsim.calibration.harness_fused import fused_cast_fn

        compiled = fused_cast_fn(env, direction)
        cast = lambda t: compiled(t["x"], fmax_t)  # noqa: E731
    nbytes = _nbytes(first.values())
    sets = [first] + [make() for _ in range(_sets_for(nbytes, env.l2_bytes) - 1)]
    return Bench(lambda i: cast(sets[i]), len(sets), nbytes)


# ----------------------------------------------------------------------------- update kinds


def megatron_stage_shapes(op: Op) -> list[tuple[int, ...]]:
    """Parameter tensors of one MP rank of a Megatron stage (Table II/III), optimizer kinds."""
    d, mp, f = op.d, op.mp, op.ffn
    v = op.v if op.v > 1 else padded_vocab(50257, mp)
    layer = [(d,), (d,), (3 * d // mp, d), (3 * d // mp,), (d, d // mp), (d,), (d,), (d,),
             (f // mp, d), (f // mp,), (d, f // mp), (d,)]
    shapes = layer * op.layers
    if op.kind is OpKind.OPTIMIZER_FIRST:
        shapes = [(v // mp, d)] + shapes
    elif op.kind is OpKind.OPTIMIZER_LAST:
        shapes = shapes + [(d,), (d,), (v // mp, d)]
    return shapes


def hf_shapes(op: Op) -> list[tuple[int, ...]]:
    """Parameter tensors of a Hugging Face GPT-NeoX model, in module order."""
    d, f, v, mp = op.d, op.ffn, op.v, op.mp
    layer = [(d,), (d,), (d,), (d,), (3 * d // mp, d), (3 * d // mp,), (d, d // mp), (d,), (f // mp, d), (f // mp,),
             (d, f // mp), (d,)]
    shapes = [(v // mp, d)] + layer * op.layers + [(d,), (d,), (v // mp, d)]
    assert sum(math.prod(s) for s in shapes) == hf_params(op)
    return shapes


def _update_bench(op: Op, env: Env) -> Bench:
    torch = env.torch
    shapes = hf_shapes(op) if op.kind in (OpKind.HF_OPTIMIZER, OpKind.HF_GRAD_ACCUM) else megatron_stage_shapes(op)
    params = [env.randn(*s, dtype=torch.float32, scale=0.02).requires_grad_(True) for s in shapes]
    grads = [env.randn(*s, dtype=torch.float32, scale=1e-3) for s in shapes]
    nbytes = _nbytes(params) * 2
    if op.kind is OpKind.HF_GRAD_ACCUM:  # AccumulateGrad: .grad += new, one in-place add per tensor
        acc = [g.clone() for g in grads]

        def accumulate(_i):
            for a, g in zip(acc, grads, strict=True):
                a.add_(g)
        return Bench(accumulate, 1, nbytes)
    fused = env.device.type == "cuda"
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    except (RuntimeError, TypeError, ValueError):
        fused = False
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    del fused

    def attach(_i):
        for p, g in zip(params, grads, strict=True):
            p.grad = g

    def step(_i):
        opt.step()
        if op.kind is OpKind.HF_OPTIMIZER:
            opt.zero_grad(set_to_none=True)
    return Bench(step, 1, nbytes, before=attach)


# ----------------------------------------------------------------------------- timing


def build_bench(op: Op, direction: Direction, env: Env) -> Bench:
    if op.kind.is_optimizer:
        return _update_bench(op, env)
    if op.kind in FP8_KINDS:
        return _fp8_bench(op, direction, env)
    return _kernel_bench(op, direction, env)


def time_bench(bench: Bench, env: Env, warmup: int = WARMUP, iters: int = ITERS) -> list[float]:
    """Per-run durations in microseconds."""
    torch = env.torch
    cuda = env.device.type == "cuda"
    launch_s = []
    for i in range(warmup):
        if bench.before:
            bench.before(i % bench.sets)
        t0 = time.perf_counter()
        bench.run(i % bench.sets)
        launch_s.append(time.perf_counter() - t0)  # the CPU's cost of queueing one run
    out: list[float] = []
    if cuda:
        torch.cuda.synchronize(env.device)
        if env.cpu_ahead and env.sleep_cycles_per_ms > 0:
            # long enough for the CPU to queue every timed run (1.5x its measured queueing time + 1 ms)
            queue_ms = 1.5 * iters * (sorted(launch_s)[len(launch_s) // 2] if launch_s else 1e-3) * 1e3 + 1.0
            torch.cuda._sleep(int(queue_ms * env.sleep_cycles_per_ms))
        events = []
        for i in range(iters):
            j = (warmup + i) % bench.sets
            if bench.before:
                bench.before(j)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            bench.run(j)
            e.record()
            events.append((s, e))
        torch.cuda.synchronize(env.device)
        out = [s.elapsed_time(e) * 1000.0 for s, e in events]
    else:
        for i in range(iters):
            j = (warmup + i) % bench.sets
            if bench.before:
                bench.before(j)
            t0 = time.perf_counter()
            bench.run(j)
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def make_env(device: str = "cuda", precision: str = "bf16", seed: int = 0, cpu_ahead: bool = False) -> Env:
    """Check torch and the device, and return the benchmarking environment."""
    torch = import_torch()
    if device == "cuda":
        if not torch.cuda.is_available():
            raise TorchUnavailable("CUDA is not available on this machine (torch "
                                   f"{torch.__version__}, built for CUDA {torch.version.cuda}); use --device cpu")
        dev = torch.device("cuda", torch.cuda.current_device())
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", L2_BYTES_DEFAULT))
        torch.backends.cuda.matmul.allow_tf32 = True
    elif device == "cpu":
        dev, l2 = torch.device("cpu"), 4 * 2**20
    else:
        raise ConfigError("--device", f"unknown device {device!r}; expected cuda or cpu")
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in dtypes:
        raise ConfigError("--precision", f"unknown precision {precision!r}; expected bf16 or fp16")
    gen = torch.Generator(device=dev).manual_seed(seed)
    env = Env(torch, dev, dtypes[precision], gen, l2_bytes=l2 or L2_BYTES_DEFAULT, cpu_ahead=cpu_ahead)
    if cpu_ahead and dev.type == "cuda":
        env.sleep_cycles_per_ms = _sleep_rate(torch)
        env.notes["timing"] = (f"GPU time only: a sleep kernel ({env.sleep_cycles_per_ms:.3g} cycles/ms) holds the GPU "
                               f"while the CPU queues the timed runs")
    return env


def _sleep_rate(torch: Any) -> float:
    """Cycles of ``torch.cuda._sleep`` per millisecond on this GPU (timed with CUDA events)."""
    cycles = 20_000_000
    torch.cuda._sleep(cycles // 10)  # warm
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(cycles)
    e.record()
    e.synchronize()
    return cycles / max(s.elapsed_time(e), 1e-3)


def device_meta(env: Env, precision: str) -> dict:
    torch = env.torch
    meta: dict[str, Any] = {
        "precision": precision, "device": env.device.type, "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": sys.version.split()[0],
        "protocol": {"warmup": WARMUP, "iters": ITERS, "statistic": "mean of the middle 5 of sorted samples",
                     "timer": "cuda events" if env.device.type == "cuda" else "time.perf_counter",
                     "rotation": "input sets rotated until they exceed 2x L2", "l2_bytes": env.l2_bytes},
    }
    if env.device.type == "cuda":
        p = torch.cuda.get_device_properties(env.device)
        meta.update(gpu=p.name, sm_count=p.multi_processor_count, gpu_memory_bytes=p.total_memory,
                    cudnn=torch.backends.cudnn.version())
        try:
            import subprocess

            meta["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            meta["driver"] = None
    else:
        import platform

        meta.update(gpu=None, cpu=platform.processor() or platform.machine(), driver=None)
    return meta


def measure(op: Op, direction: Direction, env: Env, warmup: int = WARMUP, iters: int = ITERS) -> float:
    """Robust duration (µs) of one operator at one shape, in one direction."""
    bench = build_bench(op, direction, env)
    try:
        return robust_mean(time_bench(bench, env, warmup, iters))
    finally:
        del bench
        if env.device.type == "cuda":
            env.torch.cuda.empty_cache()


def pending(plan: Sequence[tuple[Op, Direction]], out_dir: str | Path) -> list[tuple[Op, Direction]]:
    """The (op, direction) pairs of ``plan`` (duplicates once) not yet measured into ``out_dir``."""
    done = _measured(out_dir)
    return [(o, d) for o, d in dict.fromkeys(plan) if (o, d) not in done]


def _measured(out_dir: str | Path) -> set[tuple[Op, Direction]]:
    from trainsim.calibration.samples import COMPUTE_FILE, read_compute

    path = Path(out_dir) / COMPUTE_FILE
    return {(s.op, s.direction) for s in read_compute(path)} if path.exists() else set()


def run_plan(
    plan: Sequence[tuple[Op, Direction]],
    out_dir: str | Path,
    env: Env,
    precision: str,
    time_budget_s: float | None = None,
    warmup: int = WARMUP,
    iters: int = ITERS,
    on_sample: Callable[[int], None] | None = None,
    progress: Callable[[int], None] | None = None,
    extra_meta: dict | None = None,
) -> dict:
    """Measure every (op, direction) of ``plan`` not yet in ``out_dir``; append each as measured.

    Returns counts: ``measured``, ``skipped`` (already present), ``failed`` (out of memory),
    ``remaining`` (left when the time budget ran out). ``on_sample(k)`` is called after
    the k-th new sample is written (tests use it to interrupt a run); ``progress(1)`` after
    each attempted sample, measured or out of memory (``len(pending(plan, out_dir))`` in all).
    """
    from trainsim.calibration.samples import ComputeSample, SampleWriter, read_meta

    require_fp8(env, {o.kind for o, _ in plan})  # before anything is written
    out = Path(out_dir)
    writer = SampleWriter(out)
    meta_path = out / "meta.json"
    meta = read_meta(meta_path) if meta_path.exists() else {}
    if meta.get("precision") not in (None, precision):
        raise ConfigError("--precision", f"{out} holds {meta['precision']} samples; cannot add {precision} ones")
    meta.update(device_meta(env, precision))
    meta.update(extra_meta or {})
    meta.setdefault("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    writer.write_meta(meta)

    done = _measured(out)
    todo = [(o, d) for o, d in dict.fromkeys(plan) if (o, d) not in done]
    stats = {"measured": 0, "skipped": len(plan) - len(todo), "failed": 0, "remaining": 0}
    report = progress if callable(progress) else None  # a bool (the former tqdm switch) reports nothing
    t0 = time.monotonic()
    torch = env.torch
    try:
        for n, (op, direction) in enumerate(todo):
            if time_budget_s is not None and time.monotonic() - t0 > time_budget_s:
                stats["remaining"] = len(todo) - n
                break
            try:
                us = measure(op, direction, env, warmup, iters)
            except torch.OutOfMemoryError:
                stats["failed"] += 1
                torch.cuda.empty_cache()
                if report is not None:
                    report(1)
                continue
            writer.append_compute(ComputeSample(op, direction, max(us, 1e-3)))
            stats["measured"] += 1
            if report is not None:
                report(1)
            if on_sample is not None:
                on_sample(stats["measured"])
    finally:
        meta["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta["samples"] = len(done) + stats["measured"]
        meta.update(env.notes)
        writer.write_meta(meta)
    return stats
