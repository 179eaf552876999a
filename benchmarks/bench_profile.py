"""Profile benchmarks: cold fit, warm load, cache size, op_seconds latency.

Usage: python benchmarks/bench_profile.py [--reference-data DIR] [--repeats N]
Cold fits run in a fresh temporary cache; warm loads are timed in fresh
subprocesses (so imports count, as for ``trainsim predict``) and in-process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainsim.calibration.profile import load_profile  # noqa: E402
from trainsim.operators import Direction, Op, OpKind  # noqa: E402
from trainsim.operators.partition import padded_vocab  # noqa: E402


def batch() -> list[Op]:
    """~30 distinct operators: GPT-20B-like encoders at two mp degrees plus head ops."""
    ops = []
    for mp in (4, 8):
        v = padded_vocab(50257, mp)
        for k in (OpKind.LAYERNORM, OpKind.LINEAR1, OpKind.BADDBMM, OpKind.FUSED_SOFTMAX, OpKind.BMM,
                  OpKind.LINEAR2, OpKind.RES_ADD, OpKind.LINEAR3, OpKind.GELU, OpKind.LINEAR4,
                  OpKind.EMBEDDING, OpKind.LINEAR_FINAL, OpKind.CROSS_ENTROPY, OpKind.ROPE, OpKind.FLASH_ATTN):
            ops.append(Op(k, b=4, l=2048, d=6144, h=64, mp=mp, v=v))
    return ops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference-data", default=str(REPO.parent / "shared/reference-data/estimate-train-time"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    ops = batch()
    rows = []
    for cluster in ("Perlmutter", "Vista"):
        name = f"reference:{cluster}"
        with tempfile.TemporaryDirectory() as cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                prof = load_profile(name, reference_dir=args.reference_data, cache_dir=cache)
                cold = time.perf_counter() - t0
                warm_in = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    prof = load_profile(name, reference_dir=args.reference_data, cache_dir=cache)
                    warm_in.append(time.perf_counter() - t0)
                lat = []
                for _ in range(args.repeats * 20):
                    prof._warned.clear()
                    t0 = time.perf_counter()
                    prof.op_seconds(ops, Direction.FWD)
                    lat.append(time.perf_counter() - t0)
            code = ("import time; t=time.perf_counter(); import warnings; warnings.simplefilter('ignore'); "
                    "from calibration import load_profile; "
                    f"load_profile({name!r}, reference_dir={args.reference_data!r}, cache_dir={cache!r}); "
                    "print(time.perf_counter()-t)")
            warm_proc = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                     check=True)
                warm_proc.append((float(out.stdout.strip()), time.perf_counter() - t0))
            size = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file()) / 2**20
        mapes = [r["validation_mape_pct"] for r in prof.selection_report() if r["validation_mape_pct"] is not None]
        op_m = [r["validation_mape_pct"] for r in prof.selection_report()
                if r["validation_mape_pct"] is not None and r["direction"] in ("fwd", "bwd", "update")]
        rows.append((cluster, cold, statistics.median(warm_in), statistics.median(w for w, _ in warm_proc),
                     statistics.median(t for _, t in warm_proc), size, statistics.median(lat) * 1e3,
                     float(np.median(op_m)), max(op_m), float(np.median(mapes)), max(mapes)))
    print(f"{len(ops)} ops per op_seconds batch; medians of {args.repeats} (latency: {args.repeats * 20})")
    hdr = ("profile", "cold fit s", "warm load s (in-proc)", "warm load s (new proc, incl. imports)",
           "python -c total s", "cache MB", "op_seconds ms", "op MAPE% median", "op MAPE% worst",
           "all MAPE% median", "all MAPE% worst")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for r in rows:
        print(f"| reference:{r[0]} | " + " | ".join(f"{x:.3g}" for x in r[1:]) + " |")


if __name__ == "__main__":
    main()
