"""Time the link model on a 16,384-GPU layout (pp16 mp8 dp128 on dgx-h100).

Builds the placement and link model, then the loads of every MP all-reduce group, every
DP all-reduce group and every P2P pair. Prints the median of several repeats.

    python benchmarks/bench_topology.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from trainsim.operators import CollKind, Parallelism
from trainsim.topology import LinkModel, Placement, get_cluster


def one_run() -> tuple[float, float, int]:
    t0 = time.perf_counter()
    cluster = get_cluster("dgx-h100")
    placement = Placement(Parallelism(pp=16, mp=8, dp=128), cluster.gpus_per_node)
    lm = LinkModel(cluster, placement)
    t1 = time.perf_counter()
    n = 0
    for g in placement.mp_groups():
        n += len(lm.loads(CollKind.ALL_REDUCE, g))
    for g in placement.dp_groups():
        n += len(lm.loads(CollKind.ALL_REDUCE, g))
    for s in range(placement.par.pp - 1):
        for a, b in placement.p2p_pairs(s):
            n += len(lm.loads_p2p(a, b))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    runs = [one_run() for _ in range(args.repeats)]
    build = statistics.median(r[0] for r in runs)
    loads = statistics.median(r[1] for r in runs)
    print(f"{platform.processor() or platform.machine()} python {platform.python_version()}")
    print(f"placement+linkmodel build: {build * 1e3:.1f} ms; all group loads: {loads * 1e3:.1f} ms; "
          f"total {(build + loads) * 1e3:.1f} ms ({runs[0][2]} link entries), median of {args.repeats}")


if __name__ == "__main__":
    main()
