"""Simulator speed: wall time, events/s and peak memory of realistic simulations.

Run from the repo root: ``python benchmarks/bench_sim.py [--repeat 3] [--big]``. Results go
into docs/benchmarks.md ("Simulation"). Costs come from a tiny analytic duration model
(roofline-like: FLOPs at half the GPU's peak plus bytes at HBM bandwidth; collectives
fall back to the topology's closed form) because the simulator's speed does not depend on
where the numbers come from.
"""

from __future__ import annotations

import argparse
import math
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainsim.operators import ModelSpec, Parallelism, TrainingSpec, build_stage_plans  # noqa: E402
from trainsim.operators.ops import bytes_moved, flops  # noqa: E402
from trainsim.sim.costs import build_costs  # noqa: E402
from trainsim.sim.engine import simulate  # noqa: E402
from trainsim.topology import get_cluster  # noqa: E402


class AnalyticModel:
    """FLOPs at half of peak plus HBM traffic; collectives left to the closed form (NaN)."""

    name = "analytic"

    def __init__(self, peak_flops: float, mem_bw: float) -> None:
        self.peak, self.bw = peak_flops, mem_bw

    def op_seconds(self, ops, direction):
        return np.array([flops(o, direction) / (0.5 * self.peak) + bytes_moved(o, direction) / self.bw + 5e-6
                         for o in ops])

    def collective_seconds(self, colls):
        return np.full(len(colls), math.nan)


GPT20B = ModelSpec("gpt-20b", hidden=6144, heads=64, layers=44, seq_len=2048, fwd_mp_syncs=1, bwd_mp_syncs=2)
GPT175B = ModelSpec("gpt-175b", hidden=12288, heads=96, layers=96, seq_len=2048)


def make_costs(model: ModelSpec, cluster_name: str, pp: int, mp: int, dp: int, m: int):
    cluster = get_cluster(cluster_name)
    training = TrainingSpec(micro_batch=4 if model is GPT20B else 1, micro_batches=m)
    par = Parallelism(pp=pp, mp=mp, dp=dp)
    plans = build_stage_plans(model, training, par)
    model_ = AnalyticModel(cluster.gpu.peak_flops, cluster.gpu.mem_bw)
    return build_costs(plans, training, par, cluster, model_), cluster


CASES = [
    # name, model, cluster, pp, mp, dp, m
    ("128 GPUs gpt-20b 4-4-8 perlmutter", GPT20B, "perlmutter", 4, 4, 8, 16),
    ("128 GPUs gpt-20b 4-4-8 perlmutter m=64", GPT20B, "perlmutter", 4, 4, 8, 64),
    ("256 GPUs gpt-20b 4-4-16 perlmutter", GPT20B, "perlmutter", 4, 4, 16, 16),
    ("1024 GPUs gpt-20b 8-4-32 dgx-h100", GPT20B, "dgx-h100", 8, 4, 32, 16),
    ("1024 GPUs gpt-20b 8-4-32 dgx-h100 m=64", GPT20B, "dgx-h100", 8, 4, 32, 64),
    ("4096 GPUs gpt-175b 16-8-32 dgx-h100 m=64", GPT175B, "dgx-h100", 16, 8, 32, 64),
]
BIG = ("16384 GPUs gpt-175b 16-8-128 dgx-h100 m=64", GPT175B, "dgx-h100", 16, 8, 128, 64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also run the 16,384-GPU case (once)")
    ap.add_argument("--only-big", action="store_true")
    args = ap.parse_args()
    cases = [] if args.only_big else list(CASES)
    if args.big or args.only_big:
        cases.append(BIG)
    print(f"# {platform.node()} {platform.processor() or platform.machine()} python {platform.python_version()} "
          f"{time.strftime('%Y-%m-%d')}")
    print("| case | GPUs | stage replicas | m | median sim wall s | events | events/s | iteration s | eq7 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model, cl, pp, mp, dp, m in cases:
        costs, cluster = make_costs(model, cl, pp, mp, dp, m)
        walls, res = [], None
        reps = 1 if dp * pp >= 2048 else args.repeat
        for _ in range(reps):
            t0 = time.perf_counter()
            res = simulate(costs, cluster, mode="realistic", seed=0)
            walls.append(time.perf_counter() - t0)
        wall = statistics.median(walls)
        print(f"| {name} | {pp * mp * dp} | {pp * dp} | {m} | {wall:.3f} | {res.events} | "
              f"{res.events / res.sim_wall_s:,.0f} | {res.iteration_s:.4f} | {res.eq7_s:.4f} |", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the whole run: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
