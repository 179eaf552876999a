"""The power cap's slowdown as training iterations show it, against the one the model charges (H200).

Every committed table pair with a cool burst (each iteration after 2-3 s idle: the first iteration after
idle runs cool throughout, machine EB, docs/efficiency.md) and the fastest iteration of the second half of
a sustained run, on the Hugging Face path (validation/throttle_onset_*, broad_hf2_*_throttle_*,
power_same_chip_*) and on train_3d.py's, one GPU (train3d_power_*, ``t3d``) and two (``t3d2``). Per row:
the model's tensor-core share D, filler class w and curve factor g (its power-cap note), the measured
sustained-over-burst slowdown S and the training's own g = 1 + S / D, and the model's capped over its
cap-free iteration.

    python validation/cap_training_g.py [--set SECTION.KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HF_SETS = (("AN", "throttle_onset_h200_machineAN"), ("DL", "throttle_onset_h200_machineDL"),
           ("DA", "broad_hf2_h200_throttle_machineDA"), ("DB", "power_same_chip_h200_machineDB"),
           ("EE", "hf_decompose_h200_machineEE/pairs"))
#: (tag, folder, path label): train_3d.py on one GPU (DW), and pp2, mp2, dp2 on a 2x H200 (ED)
T3D_SETS = (("DW", "train3d_power_h200_machineDW", "t3d"), ("ED", "train3d_power_h200_2gpu_machineED/pp2", "t3d2"),
            ("ED", "train3d_power_h200_2gpu_machineED/mp2", "t3d2"),
            ("ED", "train3d_power_h200_2gpu_machineED/dp2", "t3d2"))
NOTE = re.compile(r"tensor-core work (\d+) % of the iteration beside other work of filler class ([\d.]+)"
                  r".*?bf16 x([\d.]+)")


def cap_note(notes) -> tuple[float, float, float] | tuple[None, None, None]:
    for n in notes:
        m = NOTE.search(n)
        if m:
            return float(m[1]) / 100, float(m[2]), float(m[3])
    return None, None, None


def hf_rows(extra: list[str]) -> list[dict]:
    from trainsim.scenarios.commands.validate import read_measured, row_overrides
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario

    out = []
    for tag, folder in HF_SETS:
        burst = {r["name"]: r for r in read_measured(str(ROOT / "validation" / folder / "measured_burst.csv"))}
        sus = {r["name"]: r for r in read_measured(str(ROOT / "validation" / folder / "measured_sustained_min.csv"))}
        for name, row in burst.items():
            over = row_overrides(row, extra)
            capped = predict(load_scenario("gptneox-h100", over))
            free = predict(load_scenario("gptneox-h100", [*over, "profile.power_cap=false"]))
            d, w, g = cap_note(capped.costs.notes)
            out.append({"set": tag, "name": name, "path": "hf", "burst_s": float(row["iteration_s"]),
                        "sustained_min_s": float(sus[name]["iteration_s"]), "capped_s": capped.eq7.iteration_s,
                        "free_s": free.eq7.iteration_s, "D": d, "w": w, "g": g})
    return out


def t3d_rows(extra: list[str]) -> list[dict]:
    from trainsim.scenarios.compare_multi import rows as runs  # what `trainsim validate --measured-multi` prints

    out = []
    for tag, folder, label in T3D_SETS:
        base = ROOT / "validation" / folder
        capped = runs(base / "measured_burst.csv", overrides=extra)
        free = runs(base / "measured_burst.csv", overrides=[*extra, "profile.power_cap=false"])
        sus = runs(base / "measured_sustained_min.csv", overrides=extra)
        for c, f, s in zip(capped, free, sus, strict=True):
            d, w, g = cap_note(c["notes"])
            out.append({"set": tag, "name": f"{c['layout'].replace('-mp1', '').replace('-dp1', '')} {c['shape']}"
                        if label == "t3d2" else c["shape"], "path": label, "burst_s": c["measured_s"],
                        "sustained_min_s": s["measured_s"], "capped_s": c["simulated_s"], "free_s": f["simulated_s"],
                        "D": d, "w": w, "g": g})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = p.parse_args(argv)
    rows = hf_rows(args.set) + t3d_rows(args.set)
    print("set  row              path  D     w     model g | S       training g | model cap  cap-free/burst")
    for r in sorted(rows, key=lambda r: r["D"] or 0.0):
        s = r["sustained_min_s"] / r["burst_s"] - 1
        g_train = 1 + s / r["D"] if r["D"] else float("nan")
        print(f"{r['set']:4s} {r['name']:16s} {r['path']:4s}  {r['D'] or 0:.2f}  {r['w'] or 0:.2f}  "
              f"{r['g'] or 1:.3f}   | "
              f"{100 * s:+5.1f} %  {g_train:.3f}      | {100 * (r['capped_s'] / r['free_s'] - 1):+5.1f} %    "
              f"{100 * (r['free_s'] / r['burst_s'] - 1):+5.1f} %")
    for path in ("hf", "t3d", "t3d2"):
        rr = [r for r in rows if r["path"] == path]
        if not rr:
            continue
        s = [100 * (r["sustained_min_s"] / r["burst_s"] - 1) for r in rr]
        cap = [100 * (r["capped_s"] / r["free_s"] - 1) for r in rr]
        err = [100 * (r["capped_s"] / r["sustained_min_s"] - 1) for r in rr]
        print(f"{path}: {len(rr)} rows; measured S mean {statistics.mean(s):+.2f} %, the model's cap mean "
              f"{statistics.mean(cap):+.2f} %; capped against the sustained fastest: MAPE "
              f"{statistics.mean(abs(e) for e in err):.2f} %, bias {statistics.mean(err):+.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
