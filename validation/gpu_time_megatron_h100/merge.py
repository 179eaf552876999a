"""Write the GPU-only re-timings of this folder into the shipped H100 compute.csv, row by row.

Every row of calibration/profiles/h100-sxm-bf16/compute.csv whose (op, direction, shape) was re-timed
here (validation/remeasure_gpu_time.py) gets the new duration; every other row, the file's order,
line endings and number format are kept (a shape measured twice before now has one value).

    python validation/gpu_time_megatron_h100/merge.py
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parents[1] / "calibration/profiles/h100-sxm-bf16/compute.csv"
KEY = ("op", "direction", "b", "l", "d", "h", "mp", "v", "f", "layers", "kv")


def main() -> None:
    new = {tuple(r.get(k) or "0" for k in KEY): r["duration_us"]
           for r in csv.DictReader(open(HERE / "compute.csv", newline=""))}
    text = SHIPPED.read_bytes().decode()
    lines = text.split("\r\n")
    header = lines[0].split(",")
    col = header.index("duration_us")
    out, replaced = [lines[0]], 0
    for line in lines[1:]:
        if not line:
            out.append(line)
            continue
        f = line.split(",")
        row = dict(zip(header, f, strict=True))
        key = tuple(row.get(k) or "0" for k in KEY)
        if key in new:
            f[col] = new[key]
            replaced += 1
        out.append(",".join(f))
    SHIPPED.write_bytes("\r\n".join(out).encode())
    print(f"{replaced} of {len(lines) - 2} rows re-timed GPU-only ({len(new)} shapes)")


if __name__ == "__main__":
    main()
