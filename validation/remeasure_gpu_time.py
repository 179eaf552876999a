"""Re-time a shipped profile's samples of some kinds with the GPU alone (``--gpu-time``), shape by shape.

The H100 profile's Megatron-path kinds were timed with CUDA events around each run, so a cheap
kernel carries the host's cost of issuing it (a residual add's backward is never under 53.5 us;
GPU-only on the H200, 2.9 us; docs/multi_gpu.md). This measures the very (operator, direction,
shape) rows of those kinds again with a sleep kernel holding the GPU while the CPU queues the
timed runs (calibration.harness, ``cpu_ahead``), into a sample directory; resumable (rows already
there are skipped), cheap kinds first.

    PYTHONPATH=. python validation/remeasure_gpu_time.py --kinds res_add,layernorm --out DIR [--time-budget S]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHIPPED = Path(__file__).resolve().parents[1] / "calibration/profiles/h100-sxm-bf16/compute.csv"


def main() -> int:
    from trainsim.calibration.harness import make_env, run_plan
    from trainsim.calibration.samples import read_compute

    p = argparse.ArgumentParser()
    p.add_argument("--kinds", required=True, help="comma-separated kinds, in the order to measure them")
    p.add_argument("--out", required=True)
    p.add_argument("--source", default=str(SHIPPED))
    p.add_argument("--time-budget", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    kinds = args.kinds.split(",")
    samples = read_compute(Path(args.source))
    plan = [(s.op, s.direction) for k in kinds for s in samples if s.op.kind.value == k]
    env = make_env("cuda", "bf16", args.seed, cpu_ahead=True)
    stats = run_plan(plan, args.out, env, "bf16", time_budget_s=args.time_budget,
                     extra_meta={"plan": f"the {args.source} rows of {args.kinds}, GPU time only",
                                 "timing": "GPU time only: a sleep kernel holds the GPU while the CPU queues "
                                           "the timed runs", "plan_rows": len(plan)})
    print(f"{args.out}: {stats['measured']} measured, {stats['skipped']} already there, "
          f"{stats['failed']} out of memory, {stats['remaining']} left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
