"""How well a transfer profile predicts a GPU it never measured: per-operator MAPE on real samples.

``python -m trainsim.calibration.transfer_check [--reference-data DIR] [--source h100-sxm-bf16]``
prices every operator sample of the reference clusters (Perlmutter: A100-SXM4-80GB, the part its
files name; Vista: GH200; method.md) with ``transfer:<that GPU>`` — the source profile's
efficiencies on the target's datasheet roofline — and prints, per operator and direction, the MAPE
against the measured duration, the median signed error, and the same for the raw source profile (the
H100's prices used as they are, the "no transfer" baseline). Nothing of the target GPU is fitted:
its samples only score the result.

The reference samples were taken in fp16 with the paper's Megatron operators; the H100 profile
measured the same operator code in bf16 (same tensor-core rate on both GPUs' datasheets).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from trainsim.calibration.efficiency import REFERENCE_GPUS, gpu_of_samples
from trainsim.calibration.profile import ExtrapolationWarning, load_profile
from trainsim.calibration.reference import load_reference, resolve_reference_dir
from trainsim.calibration.samples import META_FILE, load_sample_dir, read_meta

GEMM_KINDS = ("linear1", "linear2", "linear3", "linear4", "linear_final", "baddbmm", "bmm")


def check(cluster: str, reference_dir: str | None, source: str, cache_dir: str | None = None) -> list[dict]:
    """One row per (operator, direction): n, transfer MAPE and median error, source-as-is MAPE."""
    root = resolve_reference_dir(reference_dir)
    compute, _ = load_reference(root, cluster)
    return score(cluster, REFERENCE_GPUS[cluster], compute, source, cache_dir)


def check_samples(directory: str, source: str, cache_dir: str | None = None, min_us: float = 0.0) -> list[dict]:
    """:func:`check` on a measured sample directory of another GPU (its ``meta.json`` names it),
    e.g. the H200's operator samples scored against the H100's transferred efficiencies. ``min_us``
    keeps the samples at least that long (the H100's Megatron kinds were timed with CUDA events
    around each run, the H200's on the GPU alone: below ~100 us the two methods, not the GPUs, differ)."""
    samples = load_sample_dir(directory)
    gpu = gpu_of_samples(read_meta(Path(directory) / META_FILE), str(Path(directory) / META_FILE))
    return score(directory, gpu, [s for s in samples.compute if s.duration_us >= min_us], source, cache_dir)


def score(cluster: str, gpu: str, compute: list, source: str, cache_dir: str | None) -> list[dict]:
    """Price ``compute`` (samples of ``gpu``; ``cluster`` labels the rows) with ``source``'s
    efficiencies moved to that GPU."""
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
    p.add_argument("--samples", action="append", default=None, metavar="DIR",
                   help="instead: a measured sample directory of another GPU (e.g. calibration/profiles/h200-sxm-bf16)")
    p.add_argument("--min-us", type=float, default=0.0, help="with --samples: only samples at least this long")
    args = p.parse_args(argv)
    print("| cluster (GPU) | operator | dir | n | transfer MAPE | median error | H100 prices as-is MAPE |")
    print("|---|---|---|---:|---:|---:|---:|")
    def tables():  # (label, rows) of each sample directory, else of each reference cluster
        for d in args.samples or []:
            yield d, check_samples(d, args.source, min_us=args.min_us)
        if not args.samples:
            for c in args.cluster or list(REFERENCE_GPUS):
                yield c, check(c, args.reference_data, args.source)

    for cluster, rows in tables():
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
