"""Shape hold-out: how well a profile prices shapes larger than any it was fitted on.

``python -m trainsim.calibration.holdout_check [PROFILE]`` withholds, per operator and direction,
the samples whose hidden size ``d`` or sequence length ``l`` is in the top 10 % of that operator's
(``d`` and ``l`` above their 90th percentiles), fits the rest twice — ``profile.model efficiency``
and ``duration`` (monotone trees, above the range scaled with the work: ``profile.extrapolate
work``) — with the profile's own candidates, and prices the withheld samples with each. Prints the
per-operator MAPE and the MAPE over all withheld samples. Nothing withheld is seen by either fit.
Operators without ``d``/``l`` (the optimizer kinds) and FP8 casts (``d`` is a tensor width) keep all
their samples and are not scored.
"""

from __future__ import annotations

import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from trainsim.calibration.efficiency import Roofline, gpu_of_samples, launch_floor_s, measured_launch_s
from trainsim.calibration.grids import FAST_CANDIDATES
from trainsim.calibration.profile import SHIPPED_DIR, ExtrapolationWarning, fit_profile
from trainsim.calibration.samples import load_sample_dir
from trainsim.operators.ops import OpKind

QUANTILE = 0.9
UNSCORED = {OpKind.FP8_CAST}


def split(compute) -> tuple[list, list]:
    """(fitted, withheld): per (kind, direction), withheld = d or l above that operator's 90th percentile."""
    groups = defaultdict(list)
    for s in compute:
        groups[(s.op.kind, s.direction)].append(s)
    fit, held = [], []
    for (kind, _), rows in groups.items():
        if kind.is_optimizer or kind in UNSCORED or kind in (OpKind.HF_GRAD_ACCUM, OpKind.HF_OPTIMIZER):
            fit += rows
            continue
        d_cut = np.quantile([s.op.d for s in rows], QUANTILE)
        l_cut = np.quantile([s.op.l for s in rows], QUANTILE)
        for s in rows:
            (held if s.op.d > d_cut or s.op.l > l_cut else fit).append(s)
    return fit, held


def run(name: str = "h100-sxm-bf16") -> dict:
    root = Path(name) if Path(name).is_dir() else SHIPPED_DIR / name
    samples = load_sample_dir(root)
    fit, held = split(samples.compute)
    gpu = gpu_of_samples(samples.meta, str(root))
    launch = launch_floor_s(samples.compute, measured_launch_s(root))
    roofline = Roofline.for_gpu(gpu, launch)
    out: dict = {"profile": name, "fitted": len(fit), "withheld": len(held), "operators": {}}
    errors: dict[str, list[float]] = {"efficiency": [], "duration": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        for model in ("efficiency", "duration"):
            prof = fit_profile(name, fit, [], 0, candidates=FAST_CANDIDATES, monotone=True, model=model,
                               roofline=roofline if model == "efficiency" else None)
            if model == "duration":
                prof = prof.with_extrapolation("work", (roofline.peak_flops, roofline.mem_bw))
            groups = defaultdict(list)
            for s in held:
                groups[(s.op.kind, s.direction)].append(s)
            for (kind, direction), rows in sorted(groups.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
                pred = prof.op_seconds([s.op for s in rows], direction)
                meas = np.array([s.duration_us * 1e-6 for s in rows])
                err = np.abs(pred / meas - 1)
                errors[model] += err.tolist()
                out["operators"].setdefault(f"{kind.value}:{direction.value}", {"n": len(rows)})[model] = float(
                    np.mean(err) * 100)
    out["mape_pct"] = {m: float(np.mean(e) * 100) for m, e in errors.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    r = run(args[0] if args else "h100-sxm-bf16")
    print(f"{r['profile']}: {r['fitted']} samples fitted, {r['withheld']} withheld (d or l above the operator's "
          f"{QUANTILE:.0%} quantile)")
    print("| operator | n | efficiency MAPE | duration MAPE |")
    print("|---|---:|---:|---:|")
    for key, row in r["operators"].items():
        print(f"| {key} | {row['n']} | {row['efficiency']:.1f} % | {row['duration']:.1f} % |")
    print(f"| **all withheld** | {r['withheld']} | **{r['mape_pct']['efficiency']:.1f} %** | "
          f"**{r['mape_pct']['duration']:.1f} %** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
