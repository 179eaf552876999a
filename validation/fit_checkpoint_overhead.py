"""Fit the host cost of Hugging Face's gradient checkpointing per checkpointed layer and micro-batch.

Input: `validation/probe_checkpoint.py` rows (JSON lines), pairs of one shape trained on one
machine without recompute (``none``) and with ``gradient_checkpointing_enable()`` (``hf_default``).
The model already charges a checkpointed layer the re-issue of its forward (the host-GPU flow shop,
sim/costs.py ``issue_flow_shop``); what this fits is the rest, ``checkpoint_s``: with it, the
predicted difference between the two runs of a pair should be the measured one. The fit works on
the differences, so the machine's host speed and the shape's own error cancel in each pair:

    minimise  sum over pairs of  ((T(ckpt; c) - T(none)) - (t_ckpt - t_none))^2 / t_none^2

(T predicted, t the fastest measured iteration) over c >= 0, by a bounded scalar search. Writes
``checkpoint_overhead.json`` beside the profile's ``host_overhead.json``; the profile loader adds
``checkpoint_s`` to that table's ``eager`` runtime.

    python validation/fit_checkpoint_overhead.py validation/checkpoint_h100/checkpoint_tiny.jsonl \\
        validation/checkpoint_h100/checkpoint_tiny_again.jsonl validation/checkpoint_h100/checkpoint_real.jsonl \\
        --out calibration/profiles/h100-sxm-bf16/checkpoint_overhead.json
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = Path(__file__).with_name("configs_unseen4.csv")
TINY = {"hidden": "256", "heads": "4", "seq_len": "128", "micro_batch": "1"}


def shape_of(row: dict, configs: dict[str, dict]) -> dict[str, str]:
    if row["name"] in configs:
        return {k: v for k, v in configs[row["name"]].items() if k != "recompute"}
    return {**TINY, "name": row["name"], "layers": str(row["layers"]), "micro_batches": str(row["micro_batches"])}


def main() -> int:
    from scipy.optimize import minimize_scalar

    from trainsim.scenarios import compose
    from trainsim.scenarios.commands.validate import SHAPE_KEYS
    from trainsim.scenarios.schema import load_scenario

    p = argparse.ArgumentParser()
    p.add_argument("jsonl", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--scenario", default="gptneox-h100")
    args = p.parse_args()
    configs = {r["name"]: r for r in csv.DictReader(open(CONFIGS))}
    pairs = []
    for f in args.jsonl:
        rows = [json.loads(line) for line in open(f)]
        by = {(r["name"], r["variant"]): r for r in rows}
        for (name, variant), r in by.items():
            if variant == "hf_default" and (name, "none") in by:
                pairs.append((f, shape_of(r, configs), by[name, "none"]["min_s"], r["min_s"]))

    def scenario(shape: dict[str, str], recompute: str):
        over = [f"{k}={shape[c]}" for c, k in SHAPE_KEYS.items() if shape.get(c)] + [f"training.recompute={recompute}"]
        return load_scenario(args.scenario, over)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = compose.duration_model(scenario(pairs[0][1], "none"))
        eager = base.host_overhead["eager"]  # type: ignore[attr-defined]
        none_t = [compose.predict(scenario(s, "none")).eq7.iteration_s for _, s, _, _ in pairs]

        def predicted_ckpt(c: float) -> list[float]:
            eager["checkpoint_s"] = c
            try:
                return [compose.predict(scenario(s, "full")).eq7.iteration_s for _, s, _, _ in pairs]
            finally:
                eager.pop("checkpoint_s", None)

        def residual(got: list[float]) -> float:
            return sum(((g - n) - (tc - tn)) ** 2 / tn ** 2
                       for g, n, (_, _, tn, tc) in zip(got, none_t, pairs, strict=True))

        res = minimize_scalar(lambda c: residual(predicted_ckpt(c)), bounds=(0.0, 0.02), method="bounded",
                              options={"xatol": 1e-6})
        c = float(res.x)
        before, after = predicted_ckpt(0.0), predicted_ckpt(c)
    print(f"checkpoint_s = {c * 1e3:.3f} ms per checkpointed layer and micro-batch ({len(pairs)} pairs; "
          f"sum of squared relative residuals {res.fun:.4f}, {residual(before):.4f} at 0)")
    print(f"{'source':28} {'shape':6} {'meas. none':>10} {'meas. ckpt':>10} {'pred. none':>10} {'ckpt c=0':>9} "
          f"{'ckpt c':>9} {'err c=0':>8} {'err c':>7}")
    for (f, s, tn, tc), n, b, a in zip(pairs, none_t, before, after, strict=True):
        print(f"{Path(f).name:28} {s['name']:6} {tn * 1e3:10.1f} {tc * 1e3:10.1f} {n * 1e3:10.1f} {b * 1e3:9.1f} "
              f"{a * 1e3:9.1f} {100 * (b / tc - 1):+7.1f}% {100 * (a / tc - 1):+6.1f}%")
    doc = {"source": [Path(f).name for f in args.jsonl], "command": "python validation/fit_checkpoint_overhead.py "
           + " ".join(args.jsonl) + f" --out {args.out}", "pairs": len(pairs),
           "model": "host seconds a checkpointed layer costs per micro-batch beyond re-issuing its forward",
           "runtimes": {"eager": {"checkpoint_s": round(c, 7)}}}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
