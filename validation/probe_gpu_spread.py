"""How much the GPUs of one host differ in speed on the same work, run at the same time, and how much
slower they run it under sustained load than in a burst: the device batches' entry to
:mod:`calibration.power_bench` (``trainsim calibrate power`` is the user's; docs/efficiency.md).

    PYTHONPATH=. python validation/probe_gpu_spread.py --gpus 4 --out out/spread.jsonl [--kernels ...]
"""

from __future__ import annotations

import argparse

from trainsim.calibration import power_bench
from trainsim.calibration.power_bench import table  # noqa: F401  (the tests read the table through here)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--out", required=True)
    power_bench.add_arguments(p)
    return p


def main() -> None:
    args = build_parser().parse_args()
    print("\n".join(power_bench.table(power_bench.measure(args.gpus, args.out, args))))


if __name__ == "__main__":
    main()
