"""Does the reference's timing protocol, not the GPU, make its GEMMs faster than ours?

The transfer check (``python -m trainsim.calibration.transfer_check``) finds the H100 profile's GEMM
prices 8-16 % slower forward and 14-28 % slower backward than the reference's GH200 samples, which
have the H100's tensor-core peak, and about as much on the A100. The reference
(DebarghaG/estimate-train-time, ``kernel_sampling/target_functions.py``) times its operators on other
data than ours:

* inputs ``torch.rand`` (uniform in [0, 1), fp16), weights ``nn.Linear``'s default init (uniform
  +-1/sqrt(k)); linear2, linear3, linear4 and linear_final without bias;
* the backward's output gradient comes from ``MSELoss`` (mean reduction) of the output against a
  random target: ``2 (out - target) / N`` in fp16 with N the output's size (10^6 to 10^9), which is
  an fp16 subnormal or zero: the backward GEMMs multiply near-zero data.

A tensor core's power depends on the bits it toggles, and a GPU near its power cap runs at a clock
set by that power. This probe times the same reference shapes on one GPU three ways, with the
operator harness's timing (10 warm-up, 10 timed runs queued behind a sleep kernel, the mean of the
middle five; ``calibration/harness.py``):

* ``ours``: the profile's own benchmark of that operator (``harness.measure``, bf16, normal data);
* ``ref``: the reference's data and bias in fp16, its loss's output gradient;
* ``ref_normal``: the reference's operator and bias in fp16, with our normal data and gradient.

``ref / ref_normal`` is the data's effect alone; ``ref`` is what the reference would have timed on
this GPU. The shapes (``--shapes``, operator fields only, no durations) are rows drawn from the
reference's published grid.

    PYTHONPATH=. python validation/probe_reference_protocol.py --shapes validation/reference_protocol/shapes.csv \
        --out $OUT/protocol.csv [--deadline-s 480]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

from trainsim.calibration.harness import Bench, autograd_bench, gemm_dims, make_env, measure, robust_mean, time_bench
from trainsim.operators.ops import Direction, Op, OpKind

FIELDS = ("kind", "b", "l", "d", "h", "mp", "v")
PROTOCOLS = ("ours", "ref", "ref_normal")
GPT_NEOX_VOCAB = 50257


def reference_dims(op: Op) -> tuple[int, int, int, bool]:
    """(tokens, k, n, bias) of the reference's linear kinds (target_functions.py)."""
    d, mp = op.d, op.mp
    if op.kind is OpKind.LINEAR_FINAL:
        return op.b * op.l, d, math.ceil(GPT_NEOX_VOCAB / (128 * mp)) * 128, False
    _, k, n = gemm_dims(op)
    return op.b * op.l, k, n, op.kind is OpKind.LINEAR1


def reference_operator(op: Op, env, normal: bool):
    """(make one input set, forward) of the reference's operator on its data (``normal=False``) or on
    normal data; ``env`` is fp16."""
    torch = env.torch
    dt, dev, gen = env.dtype, env.device, env.gen

    def rand(*shape, scale=1.0):
        if normal:
            return torch.randn(*shape, dtype=torch.float32, device=dev, generator=gen).mul_(scale).to(dt)
        return torch.rand(*shape, dtype=torch.float32, device=dev, generator=gen).to(dt)

    def uniform(*shape, bound):  # nn.Linear's kaiming-uniform init, +-1/sqrt(k)
        return (torch.rand(*shape, dtype=torch.float32, device=dev, generator=gen) * 2 - 1).mul_(bound).to(dt)

    if op.kind in (OpKind.BMM, OpKind.BADDBMM):
        B, hd, l = op.b * op.h // op.mp, op.d // op.h, op.l
        if op.kind is OpKind.BMM:  # probabilities [B, l, l] times values [B, l, hd]
            return (lambda: {"a": rand(B, l, l, scale=1.0 / l), "c": rand(B, l, hd)},
                    lambda t: torch.bmm(t["a"], t["c"]))
        return (lambda: {"a": rand(B, l, hd), "c": rand(B, hd, l)},
                lambda t: torch.baddbmm(torch.empty(B, l, l, dtype=dt, device=dev), t["a"], t["c"], beta=0.0))
    tokens, k, n, bias = reference_dims(op)
    bound = k ** -0.5

    def make():
        t = {"a": rand(tokens, k), "c": rand(n, k, scale=bound) if normal else uniform(n, k, bound=bound)}
        if bias:
            t["bias"] = rand(n, scale=0.02) if normal else uniform(n, bound=bound)
        return t
    return make, lambda t: torch.nn.functional.linear(t["a"], t["c"], t.get("bias"))


def output_gradient(op: Op, out, env, normal: bool):
    """The backward's seed: normal data, or the reference loss's gradient (MSELoss against a random
    target: uniform for the linears, normal for bmm and baddbmm), computed in fp16 as the reference does."""
    torch = env.torch
    draw = torch.randn if normal or op.kind in (OpKind.BMM, OpKind.BADDBMM) else torch.rand
    target = draw(out.shape, dtype=torch.float32, device=env.device, generator=env.gen).to(env.dtype)
    if normal:
        return target
    (g,) = torch.autograd.grad(torch.nn.functional.mse_loss(out, target), out, retain_graph=True)
    return g


def reference_bench(op: Op, direction: Direction, env, normal: bool) -> Bench:
    """The reference's operator timed as the harness times ours (``harness.autograd_bench``), its
    backward seeded by :func:`output_gradient`."""
    make, fwd = reference_operator(op, env, normal)
    return autograd_bench(lambda: {k: x.requires_grad_(True) for k, x in make().items()}, fwd, direction, env,
                          output_grad=lambda outs: (output_gradient(op, outs[0], env, normal),))


def grad_stats(op: Op, env) -> tuple[float, float]:
    """(share of exact zeros, largest |value|) of the reference loss's output gradient at this shape."""
    make, fwd = reference_operator(op, env, normal=False)
    t = make()
    for x in t.values():
        x.requires_grad_(True)
    with env.torch.enable_grad():
        g = output_gradient(op, fwd(t), env, normal=False)
    return float((g == 0).float().mean().item()), float(g.abs().max().item())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--deadline-s", type=float, default=480.0)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the bodies at tiny shapes")
    args = p.parse_args()
    t0 = time.time()
    out = Path(args.out)
    done = set()
    if out.exists():
        with out.open() as f:
            done = {tuple(r[k] for k in (*FIELDS, "direction")) for r in csv.DictReader(f)}
    bf16 = make_env(args.device, precision="bf16", cpu_ahead=True)
    fp16 = make_env(args.device, precision="fp16", cpu_ahead=True)
    with open(args.shapes) as f:
        shapes = list(csv.DictReader(f))
    new = not out.exists()
    with out.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow([*FIELDS, "direction", *(f"{p}_us" for p in PROTOCOLS), "grad_zero_share", "grad_absmax"])
        for row in shapes:
            op = Op(kind=OpKind(row["kind"]), **{k: int(row[k]) for k in FIELDS[1:]})
            for direction in (Direction.FWD, Direction.BWD):
                key = (*(row[k] for k in FIELDS), direction.value)
                if key in done:
                    continue
                if time.time() - t0 > args.deadline_s:
                    print(f"deadline: stopped with {key} pending")
                    return
                ours = measure(op, direction, bf16)
                ref = robust_mean(time_bench(reference_bench(op, direction, fp16, normal=False), fp16))
                normal = robust_mean(time_bench(reference_bench(op, direction, fp16, normal=True), fp16))
                zero, absmax = grad_stats(op, fp16) if direction is Direction.BWD else (math.nan, math.nan)
                if fp16.device.type == "cuda":
                    fp16.torch.cuda.empty_cache()
                w.writerow([*(row[k] for k in FIELDS), direction.value, f"{ours:.2f}", f"{ref:.2f}",
                            f"{normal:.2f}", f"{zero:.4f}", f"{absmax:.3g}"])
                f.flush()
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
