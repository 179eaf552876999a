"""The reference's timing protocol against ours, and what it does to the transfer check.

Reads the probe's table (validation/probe_reference_protocol.py, one H100) and the reference's own
samples at the same shapes (read from ../shared/reference-data, never copied), and prints:

1. per GEMM kind and direction, the H100's ratios ref / ours (the reference's whole protocol) and
   ref / ref_normal (its data alone), and the share of exact zeros in the reference loss's gradient;
2. a transfer without any regressor: each shape's H100 time, measured under our protocol and under
   the reference's, times the ratio of the two GPUs' roofline bounds, against the A100 and GH200
   samples at that shape;
3. the shipped transfer (transfer:<gpu> of h100-sxm-bf16) on every reference GEMM sample, as is and
   with each (kind, direction)'s measured ref / ours ratio applied.

    TRAINSIM_REFERENCE_DATA=../shared/reference-data/estimate-train-time \\
        python validation/reference_protocol/analyse.py validation/reference_protocol/h100_machineZ/protocol.csv
"""

from __future__ import annotations

import csv
import statistics
import sys
import warnings
from collections import defaultdict

import numpy as np

from trainsim.calibration.efficiency import REFERENCE_GPUS, Roofline
from trainsim.calibration.profile import ExtrapolationWarning, load_profile
from trainsim.calibration.reference import load_reference, resolve_reference_dir
from trainsim.calibration.transfer_check import GEMM_KINDS
from trainsim.operators.ops import Direction, Op, OpKind

FIELDS = ("b", "l", "d", "h", "mp", "v")


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    root = resolve_reference_dir(None)
    ref = {c: {(s.op, s.direction): s.duration_us for s in load_reference(root, c)[0]} for c in REFERENCE_GPUS}
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by[(r["kind"], r["direction"])].append(r)

    print("## 1. The reference's protocol on one H100, at its own shapes (median over shapes)\n")
    print("| kind | dir | shapes | ref / ours | ref / ref_normal (data alone) | zero share of the loss gradient |")
    print("|---|---|---:|---:|---:|---:|")
    factor = {}
    for (k, d), rs in sorted(by.items()):
        factor[(k, d)] = statistics.median(float(r["ref_us"]) / float(r["ours_us"]) for r in rs)
        data = statistics.median(float(r["ref_us"]) / float(r["ref_normal_us"]) for r in rs)
        zero = f"{statistics.median(float(r['grad_zero_share']) for r in rs):.2f}" if d == "bwd" else "-"
        print(f"| {k} | {d} | {len(rs)} | {factor[(k, d)]:.3f} | {data:.3f} | {zero} |")

    source = Roofline.for_gpu("h100-sxm", 14e-6)
    print("\n## 2. Transfer without a regressor: each shape's H100 time x the roofline ratio\n")
    print("| cluster (GPU) | GEMM samples | H100 timed our way: MAPE | timed the reference's way: MAPE |")
    print("|---|---:|---:|---:|")
    for cluster, gpu in REFERENCE_GPUS.items():
        target = Roofline.for_gpu(gpu, 14e-6)
        errs: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            op = Op(kind=OpKind(r["kind"]), **{f: int(r[f]) for f in FIELDS})
            d = Direction(r["direction"])
            measured = ref[cluster].get((op, d))
            if measured is None:
                continue
            ratio = target.work_seconds(op, d) / source.work_seconds(op, d)
            for p in ("ours", "ref"):
                errs[p].append(abs(float(r[f"{p}_us"]) * ratio / measured - 1))
        print(f"| {cluster} ({gpu}) | {len(errs['ours'])} | {np.mean(errs['ours']) * 100:.1f} % | "
              f"{np.mean(errs['ref']) * 100:.1f} % |")

    print("\n## 3. The shipped transfer on every reference GEMM sample\n")
    print("| cluster (GPU) | GEMM samples | transfer as shipped: MAPE | x the measured ref / ours per kind: MAPE |")
    print("|---|---:|---:|---:|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        base = load_profile("h100-sxm-bf16", model="efficiency")
        for cluster, gpu in REFERENCE_GPUS.items():
            transfer = base.with_target(Roofline.for_gpu(gpu, base.roofline.launch_s))  # type: ignore[union-attr]
            groups: dict[tuple[str, Direction], list] = defaultdict(list)
            for (op, d), us in ref[cluster].items():
                if op.kind.value in GEMM_KINDS:
                    groups[(op.kind.value, d)].append((op, us))
            as_is: list[float] = []
            matched: list[float] = []
            for (k, d), pairs in groups.items():
                pred = transfer.op_seconds([o for o, _ in pairs], d)
                meas = np.array([us * 1e-6 for _, us in pairs])
                as_is += list(np.abs(pred / meas - 1))
                matched += list(np.abs(pred * factor[(k, d.value)] / meas - 1))
            print(f"| {cluster} ({gpu}) | {len(as_is)} | {np.mean(as_is) * 100:.1f} % | "
                  f"{np.mean(matched) * 100:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1])
