"""The power cap's slowdown of GEMMs against their share of the GPU's time, from probe_gpu_spread.py's
GEMM:copy mixes (``mix_<dtype>_c<N>``: the 8192-cube GEMM, then N copies of 256 MiB): per mix, D (the
GEMM's share of the mix's burst time) and g (how much slower its GEMM part runs under sustained load
than in the burst), as calibration.power_cap fits them.

    python validation/power_cap_analyse.py validation/gpu_spread_h100_1gpu_machineAJ/spread.jsonl ...
"""

from __future__ import annotations

import json
import sys

from trainsim.calibration.power_cap import mix_points


def main(paths: list[str]) -> None:
    for path in paths:
        rows = [json.loads(line) for line in open(path)]
        print(path, rows[0]["name"])
        for precision, d, g in mix_points(rows):
            print(f"  {precision:5s} D {d:.2f}  g {g:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
