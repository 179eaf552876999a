"""Where a training step's own kernels sit between the power probe's copy and GELU fillers.

The sustained power cap slows tensor-core work by g(D), D the tensor-core share of a GPU's time; what
fills the rest matters (machine DE: with GELUs beside the GEMM g is x1.17 from D = 0.33, with copies
x1.02 at 0.39; docs/efficiency.md). This probe puts each of a Hugging Face GPT-NeoX step's kernels in
the filler's place, one GPU, burst then continuous load (calibration.power_bench's ``measure_kernel``):

* the references: the probe's 8192-cube bf16 GEMM, a 256 MiB copy and GELU, and the GEMM with 16 and
  4 of either (the copy and GELU curves of this chip, at D ~0.4 and ~0.75);
* per kind (``name`` = kind.direction, built by the operator harness, calibration.harness.build_bench,
  at a shape long enough that the GPU, not the host, sets each run's pace: :data:`KINDS`): the kind
  alone, and the 8192-cube GEMM followed by N of it, N chosen for D ~0.4 from the two bursts
  (``mix:<name>``).

Rows carry the kind's operator fields, so ``--analyse`` prices their tensor-core seconds with trainsim's
FLOP counts and places each kind between the curves:

    PYTHONPATH=. python validation/probe_power_class.py --out out/power_class.jsonl
    python validation/probe_power_class.py --analyse out/power_class.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIG = {"b": 8, "l": 4096, "d": 4096, "h": 32, "v": 50304}  # elementwise kinds: each run ~0.3 ms or more of GPU
MID = {"b": 4, "l": 2048, "d": 2048, "h": 16, "v": 50304}  # long enough to hide the host, short of the cap's onset
UPDATE = {"b": 1, "l": 1, "d": 2048, "h": 16, "v": 50304, "layers": 8}  # the update kinds' model, 0.5 B parameters
KINDS = {"hf_layernorm.fwd": BIG, "hf_layernorm.bwd": BIG, "gelu.fwd": MID, "gelu.bwd": MID,
         "hf_residual.fwd": BIG, "hf_loss.fwd": MID, "hf_loss.bwd": MID, "hf_optimizer.update": UPDATE,
         "hf_grad_accum.update": UPDATE, "hf_attention.fwd": MID, "hf_attention.bwd": MID,
         "hf_mlp_up.bwd": {**MID, "l": 1024}}
REFERENCES = ("gemm_bf16_8192", "copy_256mib", "gelu_256mib", "mix_bf16_c16", "mix_bf16_e16", "mix_bf16_c4",
              "mix_bf16_e4")
TARGET_D = 0.4


def op_of(name: str) -> tuple[Any, Any]:
    from trainsim.operators.ops import Direction, Op, OpKind

    kind, direction = name.split(".")
    return Op(OpKind(kind), **KINDS[name]), Direction(direction)


def kind_callable(env: Any, name: str) -> Callable[[], Any]:
    """One run of the kind, rotating its input sets as the harness does (and its untimed preparation)."""
    from trainsim.calibration.harness import build_bench

    op, direction = op_of(name)
    bench = build_bench(op, direction, env)
    state = {"i": 0}

    def run() -> None:
        i = state["i"] % bench.sets
        state["i"] += 1
        if bench.before is not None:
            bench.before(i)
        bench.run(i)
    return run


def measure(args: argparse.Namespace) -> None:
    import torch

    from trainsim.calibration.harness import make_env
    from trainsim.calibration.power_bench import make, measure_kernel

    env = make_env("cuda", "bf16")
    dev = torch.device("cuda", 0)
    out = Path(args.out)
    # a resumed run: what is measured already, and each kernel's burst (a mix's N needs its kind's and the GEMM's)
    bursts = {r["kernel"]: r["burst_s"] for r in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
    done = set(bursts)
    t = time.time()

    def record(kernel: str, fn: Callable[[], Any], extra: dict[str, Any]) -> None:
        nonlocal t
        row, t = measure_kernel(torch, 0, fn, 1.0, t, args.idle_s, args.sustain_s)
        row = {"round": 0, "kernel": kernel, **extra, **row}
        bursts[kernel] = row["burst_s"]
        with open(out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{kernel:28s} burst {row['burst_s'] * 1e3:8.3f} ms  window/burst {row['window_ratio']:.3f}"
              f"  sm {row['sm_mhz_median']}  W {row['power_w_median']}", flush=True)
        torch.cuda.empty_cache()

    for kernel in REFERENCES:
        if kernel not in done:
            fn, _ = make(torch, kernel, dev)
            record(kernel, fn, {})
            del fn
    gemm, _ = make(torch, "gemm_bf16_8192", dev)
    for name in args.kinds:
        op, direction = op_of(name)
        fields = {"op": {k: getattr(op, k) for k in ("b", "l", "d", "h", "v", "layers")} | {"kind": op.kind.value},
                  "direction": direction.value}
        fn = kind_callable(env, name)
        if name not in done:
            record(name, fn, fields)
        n = max(1, round(bursts["gemm_bf16_8192"] * (1.0 / TARGET_D - 1.0) / bursts[name]))
        mix_name = f"mix:{name}"
        if mix_name not in done:
            def mix(fn: Callable[[], Any] = fn, n: int = n) -> None:
                gemm()
                for _ in range(n):
                    fn()
            record(mix_name, mix, fields | {"n": n})
        del fn


def analyse(path: str) -> None:
    """Per kind: its mix's D and g, the chip's copy and GELU curves at that D, and the kind's place w
    between them (0: as a copy, 1: as a GELU), as calibration.power_cap.filler_classes reads the table;
    and the kind's own power alone."""
    from trainsim.calibration.power_cap import class_places

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by = {r["kernel"]: r for r in rows}
    curves, places = class_places(rows, path)
    gemm = by["gemm_bf16_8192"]
    print(f"copy curve {curves['copy'].knots}\nGELU curve {curves['gelu'].knots}\n"
          f"probe GEMM x{gemm['window_ratio']:.3f} sustained, {gemm['power_w_median']} W")
    print("kind                       N    D     g    copy   GELU     w    alone: W   SM MHz")
    for kind, d, g, gc, ge in places:
        w = f"{(g - gc) / (ge - gc):+.2f}" if ge - gc >= 0.02 else "  -  "
        alone = by[kind]
        print(f"{kind:24s} {by['mix:' + kind]['n']:3d}  {d:.2f}  {g:.3f}  {gc:.3f}  {ge:.3f}  {w}   "
              f"{alone['power_w_median']:6.1f}  {alone['sm_mhz_median']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="JSON lines to append to (resumable: kernels already there are skipped)")
    p.add_argument("--analyse", metavar="JSONL")
    p.add_argument("--kinds", type=lambda v: v.split(","), default=list(KINDS), help=", ".join(KINDS))
    p.add_argument("--sustain-s", type=float, default=8.0)
    p.add_argument("--idle-s", type=float, default=3.0)
    args = p.parse_args()
    if args.analyse:
        analyse(args.analyse)
    elif args.out:
        measure(args)
    else:
        p.error("--out or --analyse")


if __name__ == "__main__":
    main()
