"""The table of validation/device/train3d_power.sh: per train_3d.py shape, its iterations' time course
against the GPU's SM clock and power (nvidia-smi every 0.1 s).

Per shape: the median burst (``burst.jsonl``, train3d_power.sh's BURSTS: timed iterations each after
idle seconds, from a cool GPU) where measured, the protocol's figure (the fastest of timed iterations
1-8, after 3 warm-up: what the committed rows report), the fastest and the median of the load's second
half, and the median SM clock and power over the warm-up's first 0.5 s and over the second half. A
clock that holds its maximum through the load means the power cap did not bite.

    python validation/train3d_power_table.py OUT_DIR [--tables]

``--tables`` also writes each figure as a train_3d.py table in OUT_DIR (``measured_burst.csv`` where bursts
were run, ``measured_protocol.csv``, ``measured_sustained_min.csv``: the second half's fastest, with its
median as ``median_s``) for ``trainsim validate --measured-multi``.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from train_3d import COLUMNS  # noqa: E402  (the table's columns are train_3d.py's own)


def read_smi(path: Path) -> list[tuple[float, float, float]]:
    """(unix seconds, SM MHz, watts) per line of ``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,...``
    (its timestamp is the machine's local time, read back as local time on the same machine)."""
    out = []
    for line in path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            out.append((datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(f[1]), float(f[2])))
        except (ValueError, IndexError):
            continue
    return out


def load_s(rec: dict) -> float:
    """Seconds from the first iteration's start to the last one's end."""
    t, dt = rec["course"][-1]
    return t + dt


def timed(rec: dict) -> list[float]:
    """Seconds of the timed iterations (after the warm-up)."""
    return [dt for _, dt in rec["course"][rec["warmup"]:]]


def second_half(rec: dict) -> list[float]:
    """Seconds of the iterations that started in the load's second half."""
    end = load_s(rec)
    return [dt for t, dt in rec["course"] if t >= end / 2]


def figures(rec: dict, smi: list[tuple[float, float, float]]) -> dict[str, float]:
    end, half = load_s(rec), second_half(rec)
    t0 = rec["began_unix_s"]

    def window(lo: float, hi: float) -> tuple[float, float]:
        v = [(mhz, w) for t, mhz, w in smi if t0 + lo <= t < t0 + hi]
        if not v:
            return float("nan"), float("nan")
        return statistics.median(m for m, _ in v), statistics.median(w for _, w in v)

    c0, p0 = window(0.0, 0.5)
    c2, p2 = window(end / 2, end)
    return {"protocol_s": min(timed(rec)[:8]), "half_min_s": min(half), "half_median_s": statistics.median(half),
            "load_s": end, "iterations": len(rec["course"]), "mhz_start": c0, "w_start": p0, "mhz_half": c2,
            "w_half": p2}


def shape_name(rec: dict) -> str:
    return f"d{rec['hidden']}-L{rec['layers']}-b{rec['micro_batch']}-m{rec['micro_batches']}" + (
        "-rc" if rec["recompute"] == "full" else "")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def write_tables(out: Path, courses: list[dict], bursts: list[dict]) -> None:
    """One train_3d.py table per figure (see the module doc); memory blank (not measured here)."""
    def rows(recs: list[dict], pick, fastest=min) -> list[dict]:
        """A row per record: ``fastest`` and the median of the seconds ``pick`` takes from it."""
        out_rows = []
        for r in recs:
            secs = pick(r)
            layout = r.get("layout", "pp1-mp1-dp1")  # ppA-mpB-dpC, as train_3d.py names it
            pp, mp, dp = (int(part[2:]) for part in layout.split("-"))
            out_rows.append({"layout": layout, "pp": pp, "mp": mp, "dp": dp, "hidden": r["hidden"],
                             "heads": r["heads"], "layers": r["layers"], "seq": r["seq"],
                             "micro_batch": r["micro_batch"], "micro_batches": r["micro_batches"],
                             "recompute": r["recompute"], "min_s": f"{fastest(secs):.6f}",
                             "median_s": f"{statistics.median(secs):.6f}",
                             "max_mem_gib": "", "device": r["device"], "torch": "", "vocab": 50257})
        return out_rows

    tables = {"measured_protocol.csv": rows(courses, lambda r: timed(r)[:8]),
              "measured_sustained_min.csv": rows(courses, second_half)}
    if bursts:  # a burst's figure is its median, fastest and median alike
        tables["measured_burst.csv"] = rows(bursts, timed, fastest=statistics.median)
    for name, table in tables.items():
        with (out / name).open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(table)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    if "--tables" in argv[1:]:
        write_tables(out, read_jsonl(out / "course.jsonl"), read_jsonl(out / "burst.jsonl"))
    smi = read_smi(out / "smi.csv") if (out / "smi.csv").exists() else []
    bursts = {shape_name(r): statistics.median(timed(r)) for r in read_jsonl(out / "burst.jsonl")}
    print("shape                     burst ms  iters load s  protocol ms  2nd-half min  median   MHz start/half   "
          "W start/half")
    for rec in read_jsonl(out / "course.jsonl"):
        f = figures(rec, smi)
        name = shape_name(rec)
        burst = f"{1e3 * bursts[name]:8.1f}" if name in bursts else "       -"
        print(f"{name:25s} {burst}  {f['iterations']:5d} {f['load_s']:6.1f}  {1e3 * f['protocol_s']:10.1f}  "
              f"{1e3 * f['half_min_s']:12.1f} {1e3 * f['half_median_s']:7.1f}   "
              f"{f['mhz_start']:5.0f}/{f['mhz_half']:5.0f}    {f['w_start']:4.0f}/{f['w_half']:4.0f}")
    onset = read_jsonl(out / "onset.jsonl")
    if onset:
        sys.path.insert(0, str(Path(__file__).parent))
        from probe_throttle_onset import pairs_table

        print("\n".join(pairs_table(onset)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
