"""``trainsim calibrate power``: this host's GPUs under sustained load, and the power cap a profile fits.

Every visible GPU runs the power probe at once (:mod:`calibration.power_bench`: the lone GEMMs, a copy
and GEMM:copy mixes, each in a burst and over seconds of continuous load); the rows are appended to
``<out>/power_spread.jsonl`` and ``<out>/power_cap.json`` is fitted from them
(:mod:`calibration.power_cap`). A sample folder holding it prices sustained load as measured
(``profile.name: <out>``). About 3 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPREAD_FILE = "power_spread.jsonl"


def register(sub: argparse._SubParsersAction) -> None:
    from trainsim.calibration.power_bench import FIT_KERNELS, add_arguments

    p = sub.add_parser("calibrate-power", help="(also `calibrate power`) this host's GPUs under sustained load: "
                                               "the power cap a profile prices")
    p.add_argument("--out", required=True, metavar="DIR", help=f"sample folder: {SPREAD_FILE} and power_cap.json")
    p.add_argument("--gpus", type=int, default=None, help="GPUs to load at once (default: every visible one)")
    add_arguments(p, FIT_KERNELS, rounds=1, sustain_s=10.0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim.calibration import power_bench
    from trainsim.calibration.harness import TorchUnavailable, import_torch
    from trainsim.calibration.power_cap import POWER_FILE, fit_power_cap
    from trainsim.operators import ConfigError

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a directory")
    if args.rounds < 1 or args.sustain_s <= 0 or args.idle_s < 0:
        raise ConfigError("--rounds", "need rounds >= 1, sustain-s > 0 and idle-s >= 0")
    try:
        torch = import_torch()
    except TorchUnavailable as e:
        print(f"trainsim: error: {e}", file=sys.stderr)
        return 2
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        print(f"trainsim: error: calibrate power needs CUDA GPUs; torch {torch.__version__} sees none",
              file=sys.stderr)
        return 2
    gpus = visible if args.gpus is None else args.gpus
    if not 1 <= gpus <= visible:
        raise ConfigError("--gpus", f"must be 1 to {visible} (the GPUs visible here), got {gpus}")
    out.mkdir(parents=True, exist_ok=True)
    rows = power_bench.measure(gpus, out / SPREAD_FILE, args)
    print("\n".join(power_bench.table(rows)))
    record = fit_power_cap([str(out / SPREAD_FILE)])
    tmp = out / (POWER_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out / POWER_FILE)
    for k, knots in record["curves"].items():
        print(f"{out / POWER_FILE}: {k} g(D) through " + ", ".join(f"({d:.2f}, {g:.3f})" for d, g in knots))
    return 0
