"""Draw a set of single-GPU HF GPT-NeoX configurations for `train_gptneox.py`, seeded, before any is measured.

The shapes a planner might try on one GPU, drawn uniformly: hidden 640-5120 in steps of 128 with
head dimension 64 or 128, 2-20 layers, sequence 512-4096, micro-batch 1-8, 1-4 micro-batches, full
recompute with probability 0.3. A draw is kept if it fits the time and memory budget of one device
batch by trainsim's own estimate (at most 48 GiB and 0.35 s per iteration on the H100 profile, at
least 0.03 s): a filter on predicted values, never on measured ones.

    python validation/draw_configs.py --seed 20261127 --n 10 --prefix x --out validation/configs_unseen4.csv

``--box broad`` draws beyond the operator samples' paper box instead: hidden 1024-10240, 1-8 layers,
sequence 1024-16384, micro-batch 1-64, 1-2 micro-batches, no recompute; a draw is kept if it leaves the
paper box (sequence over 5120, micro-batch over 16 or hidden over 8192) and, by trainsim's estimate,
fits 100 GiB and takes 0.03-0.5 s.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from trainsim.operators.memory import memory_per_gpu
    from trainsim.scenarios.commands.validate import SHAPE_KEYS
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario

    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--prefix", default="x")
    p.add_argument("--out", required=True)
    p.add_argument("--box", choices=("paper", "broad"), default="paper")
    args = p.parse_args()
    broad = args.box == "broad"
    g = np.random.default_rng(args.seed)
    rows: list[dict[str, str]] = []
    tries = 0
    while len(rows) < args.n and tries < 10_000:
        tries += 1
        hd = int(g.choice([64, 128]))
        d = int(g.integers(8, 81) if broad else g.integers(5, 41)) * 128
        row = {"name": f"{args.prefix}{len(rows) + 1:02d}", "hidden": str(d), "heads": str(d // hd)}
        # the draws in this order, one generator: a seed gives the set it gave when it was committed
        if broad:
            row.update(layers=str(int(g.integers(1, 9))),
                       seq_len=str(int(g.choice([1024, 2048, 4096, 6144, 8192, 12288, 16384]))),
                       micro_batch=str(int(g.choice([1, 2, 4, 8, 16, 24, 32, 48, 64]))),
                       micro_batches=str(int(g.integers(1, 3))), recompute="none")
            if not (int(row["seq_len"]) > 5120 or int(row["micro_batch"]) > 16 or d > 8192):
                continue
        else:
            row.update(layers=str(int(g.integers(2, 21))), seq_len=str(int(g.choice([512, 1024, 2048, 4096]))),
                       micro_batch=str(int(g.choice([1, 2, 4, 8]))), micro_batches=str(int(g.integers(1, 5))),
                       recompute="full" if g.random() < 0.3 else "none")
        overrides = [f"{key}={row[col]}" for col, key in SHAPE_KEYS.items() if row.get(col)]
        sc = load_scenario("gptneox-h100", overrides)
        pred = predict(sc)
        gib = memory_per_gpu(sc.model, sc.training, sc.parallelism, pred.plans).total_gib
        t = pred.eq7.iteration_s
        if (gib <= 100 and 0.03 <= t <= 0.5) if broad else (gib <= 48 and 0.03 <= t <= 0.35):
            rows.append(row)
            print(f"{row['name']}: d {d} h {d // hd} L {row['layers']} seq {row['seq_len']} b {row['micro_batch']} "
                  f"m {row['micro_batches']} {row['recompute']}: predicted {t:.3f} s, {gib:.1f} GiB", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
