"""Measured tables for `trainsim validate --measured` from probe_throttle_onset.py's ``--pairs`` runs.

Per configuration, three figures of the same iteration on the same GPU:

* ``burst``: the median of the iterations timed after idle gaps (the GPU below its power cap);
* ``sustained``: the median over the second half of the back-to-back load (16 s);
* ``protocol``: the fastest of the back-to-back iterations 2-9, what validation/train_gptneox.py
  reports (the fastest of 8 after 3 warm-up: its first warm-up ran before the pairs' load began);
* ``sustained_min``: the fastest over the second half of the 16 s, the minimum iteration of a run at
  its steady state under the cap (what trainsim predicts: spec/method.md), its median beside it.

Writes ``<out-dir>/measured_<figure>.csv`` for each, in train_gptneox.py's columns (memory left
blank: the probe does not measure it), and prints the sustained-over-burst ratio per row.

    python validation/throttle_tables.py validation/throttle_onset_h100_machineAO/onset.jsonl \\
        --out-dir validation/throttle_onset_h100_machineAO --profile h100-sxm-bf16
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from probe_throttle_onset import pair_figures  # noqa: E402  (the probe's own reading of its rows)

HERE = Path(__file__).parent
CONFIGS = [HERE / f"configs{s}.csv" for s in ("", "_unseen", "_unseen2", "_unseen3", "_unseen4", "_broad_hf2")]
COLUMNS = ("name", "hidden", "heads", "layers", "seq_len", "micro_batch", "micro_batches", "recompute", "vocab",
           "iteration_s", "iteration_median_s", "iters", "max_memory_allocated_bytes", "gpu", "torch")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("onset", help="probe_throttle_onset.py's JSON lines (a --pairs run)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--profile", default=None, help="price each row with this profile for its D and the curve's g")
    args = p.parse_args()
    rows = [json.loads(line) for line in open(args.onset)]
    meta = next(r for r in rows if r["kind"] == "meta")
    shapes = {r["name"]: r for path in CONFIGS for r in csv.DictReader(open(path))}
    figs = pair_figures(rows, min_sustained=10)
    for figure in ("burst", "sustained", "protocol", "sustained_min"):
        path = Path(args.out_dir) / f"measured_{figure}.csv"
        median = "sustained" if figure == "sustained_min" else figure
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            for name, f in figs.items():
                w.writerow({**{k: shapes[name][k] for k in COLUMNS[:8]}, "vocab": 50432,
                            "iteration_s": f"{f[figure]:.6f}", "iteration_median_s": f"{f[median]:.6f}",
                            "iters": "", "max_memory_allocated_bytes": "", "gpu": meta["gpu"], "torch": meta["torch"]})
        print(f"wrote {path}")
    print("config  burst ms  sustained ms  protocol ms  sustained/burst")
    for name, f in figs.items():
        print(f"{name:6s} {f['burst'] * 1e3:9.1f} {f['sustained'] * 1e3:13.1f} {f['protocol'] * 1e3:12.1f}"
              f"  x{f['sustained'] / f['burst']:.3f}" + (training_g(shapes[name], f, args.profile, meta["gpu"])
                                                        if args.profile else ""))


def training_g(shape: dict[str, str], f: dict[str, float], profile: str, device_name: str) -> str:
    from trainsim.scenarios.commands.validate import SHAPE_KEYS
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario
    from trainsim.topology.hardware import gpu_for_device_name

    overrides = [f"{key}={shape[col]}" for col, key in SHAPE_KEYS.items() if shape.get(col)]
    pred = predict(load_scenario("gptneox-h100", overrides + [f"cluster.gpu={gpu_for_device_name(device_name)}",
                                                             f"profile.name={profile}"]))
    stage = pred.costs.stages[0]
    tc = int(shape["micro_batches"]) * stage.compute_bound_s
    return (f"  D {tc / f['burst']:.2f}  training g {1 + (f['sustained'] - f['burst']) / tc:.3f}"
            f"  model g {stage.power_cap_factor:.3f}")


if __name__ == "__main__":
    main()
