"""How well a transfer profile predicts a GPU it never measured: per-operator MAPE on real samples.

``python -m trainsim.calibration.transfer_check [--reference-data DIR] [--source h100-sxm-bf16]``
prices every operator sample of the reference clusters (Perlmutter: A100-SXM4-40GB; Vista: GH200;
method.md) with ``transfer:<that GPU>`` — the source profile's efficiencies on the target's datasheet
roofline — and prints, per operator and direction, the MAPE against the measured duration, the
median signed error, and the same for the raw source profile (the H100's prices used as they are,
the "no transfer" baseline). Nothing of the target GPU is fitted: its samples only score the result.

The reference samples were taken in fp16 with the paper's Megatron operators; the H100 profile
measured the same operator code in bf16 (same tensor-core rate on both GPUs' datasheets).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict

import numpy as np

from trainsim.calibration.efficiency import REFERENCE_GPUS
from trainsim.calibration.profile import ExtrapolationWarning, load_profile
from trainsim.calibration.reference import load_reference, resolve_reference_dir

GEMM_KINDS = ("linear1", "linear2", "linear3", "linear4", "linear_final", "baddbmm", "bmm")


def check(cluster: str, reference_dir: str | None, source: str, cache_dir: str | None = None) -> list[dict]:
    """One row per (operator, direction): n, transfer MAPE and median error, source-as-is MAPE."""
    root = resolve_reference_dir(reference_dir)
    compute, _ = load_reference(root, cluster)
    gpu = REFERENCE_GPUS[cluster]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        base = load_profile(source, cache_dir=cache_dir, model="efficiency")
        transfer = base.with_target(type(base.roofline).for_gpu(gpu, base.roofline.launch_s))  # type: ignore[union-attr]
        groups: dict[tuple[str, str], list] = defaultdict(list)
        for s in compute:
            groups[(s.op.kind.value, s.direction.value)].append(s)
        rows = []
        for (kind, direction), samples in sorted(groups.items()):
            key = f"op:{kind}:{direction}"
            if key not in base.regressors:
                continue
            ops = [s.op for s in samples]
            measured = np.array([s.duration_us * 1e-6 for s in samples])
            pred = transfer.op_seconds(ops, samples[0].direction)
            raw = base.op_seconds(ops, samples[0].direction)
            err = pred / measured - 1
            rows.append({"cluster": cluster, "gpu": gpu, "operator": kind, "direction": direction, "n": len(samples),
                         "mape_pct": float(np.mean(np.abs(err)) * 100), "median_error_pct": float(np.median(err) * 100),
                         "as_is_mape_pct": float(np.mean(np.abs(raw / measured - 1)) * 100)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainsim.calibration.transfer_check",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--reference-data", default=None)
    p.add_argument("--source", default="h100-sxm-bf16")
    p.add_argument("--cluster", action="append", choices=tuple(REFERENCE_GPUS), default=None)
    args = p.parse_args(argv)
    print("| cluster (GPU) | operator | dir | n | transfer MAPE | median error | H100 prices as-is MAPE |")
    print("|---|---|---|---:|---:|---:|---:|")
    for cluster in args.cluster or list(REFERENCE_GPUS):
        rows = check(cluster, args.reference_data, args.source)
        for r in rows:
            print(f"| {cluster} ({r['gpu']}) | {r['operator']} | {r['direction']} | {r['n']} | {r['mape_pct']:.1f} % | "
                  f"{r['median_error_pct']:+.1f} % | {r['as_is_mape_pct']:.1f} % |")
        gemm = [r for r in rows if r["operator"] in GEMM_KINDS]
        for label, sel in (("GEMM operators", gemm), ("all operators", rows)):
            n = sum(r["n"] for r in sel)
            mape = sum(r["mape_pct"] * r["n"] for r in sel) / max(n, 1)
            print(f"| {cluster} ({rows[0]['gpu'] if rows else '-'}) | **{label}** | | {n} | **{mape:.1f} %** | | "
                  f"{sum(r['as_is_mape_pct'] * r['n'] for r in sel) / max(n, 1):.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
