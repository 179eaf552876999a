"""Predicted (Eq. 7 closed form and simulation) against measured 3D-parallel iteration times.

Reads the rows ``validation/train_3d.py`` appends (``validation/measured_3d.csv``) and, for
each layout, builds the scenario that describes that run:

* model: the harness's decoder (``hidden``, ``heads``, ``layers``, ``seq``, ``vocab``),
  LayerNorm, one fused attention kernel (``scaled_dot_product_attention``: ``flash``), no
  rotary embedding, 2 MP all-reduces per layer forward and 2 backward;
* training: ``micro_batch``, ``micro_batches``, ``recompute``, bf16, ZeRO stage 0 (the
  harness all-reduces the gradients and keeps full optimizer state), Megatron decomposition;
* parallelism: ``pp``, ``mp``, ``dp``, 1F1B;
* cluster: ``dgx-h200`` with ``gpus_per_node`` = the host's GPU count (all ranks of a
  layout on one host; a layout using fewer GPUs than the host is one node of its size);
* profile: ``profile_name`` (a measured ``h200-...`` profile once one exists).

and returns the closed form (:func:`scenarios.compose.predict`), the simulation
(:func:`trainsim.scenarios.compose.simulate_prediction`) and the measured minimum with the
relative errors. ``trainsim validate --measured-3d CSV --profile-3d NAME`` prints the table.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from trainsim.operators.errors import ConfigError

DEFAULT_CSV = Path(__file__).resolve().parents[1] / "validation" / "measured_3d.csv"
_INT_COLUMNS = ("pp", "mp", "dp", "hidden", "heads", "layers", "seq", "micro_batch", "micro_batches")


def scenario_mapping(row: dict, profile_name: str, host_gpus: int | None = None,
                     reference_data: str | None = None, cluster: str = "dgx-h200") -> dict:
    """The scenario mapping of one measured row (see the module docstring)."""
    gpus = int(row["pp"]) * int(row["mp"]) * int(row["dp"])
    gpn = min(host_gpus, gpus) if host_gpus else gpus
    model = {"name": "train_3d", "hidden": int(row["hidden"]), "heads": int(row["heads"]),
             "layers": int(row["layers"]), "seq_len": int(row["seq"]), "norm": "layernorm",
             "attention": "flash", "rotary": False, "fwd_mp_syncs": 2, "bwd_mp_syncs": 2}
    if row.get("vocab"):
        model["vocab"] = int(row["vocab"])
    profile = {"name": profile_name}
    if reference_data:
        profile["reference_data"] = reference_data
    return {
        "name": f"measured-{row['layout']}",
        "description": "validation/train_3d.py layout",
        "model": model,
        "training": {"micro_batch": int(row["micro_batch"]), "micro_batches": int(row["micro_batches"]),
                     "precision": "bf16", "recompute": row.get("recompute") or "none", "zero_stage": 0,
                     "framework": "megatron"},
        "parallelism": {"pp": int(row["pp"]), "mp": int(row["mp"]), "dp": int(row["dp"]), "schedule": "1f1b"},
        "cluster": {"preset": cluster, "gpus_per_node": gpn},
        "profile": profile,
        "simulation": {"mode": "realistic", "seed": 0, "overlap_dp": False},
    }


def read_measured(path: str | os.PathLike) -> list[dict]:
    p = Path(path)
    try:
        fh = p.open(newline="")
    except OSError as e:
        raise ConfigError(str(p), f"cannot read: {e.strerror}") from None
    with fh:
        reader = csv.DictReader(fh)
        missing = {"layout", "min_s", "median_s", *_INT_COLUMNS} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"{p}:1", f"missing columns: {', '.join(sorted(missing))}")
        out = []
        for row in reader:
            where = f"{p}:{reader.line_num}"
            try:
                for c in _INT_COLUMNS:
                    int(row[c])
                t = float(row["min_s"])
            except (TypeError, ValueError):
                raise ConfigError(where, "non-numeric layout or time column") from None
            if not t > 0:
                raise ConfigError(where, f"min_s must be positive, got {row['min_s']}")
            out.append(row)
    return out


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def rows(measured_csv: str | os.PathLike = DEFAULT_CSV, profile_name: str = "h200-sxm-bf16",
         host_gpus: int | None = None, reference_data: str | None = None, cluster: str = "dgx-h200") -> list[dict]:
    """One dict per measured layout: closed form, simulated and measured seconds, errors in percent."""
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.compose import simulate_prediction as simulate_scenario
    from trainsim.scenarios.schema import scenario_from_mapping

    out = []
    for row in read_measured(measured_csv):
        sc = scenario_from_mapping(scenario_mapping(row, profile_name, host_gpus, reference_data, cluster),
                                   name=f"measured-{row['layout']}")
        pred = predict(sc, reference_data=reference_data)
        sim = simulate_scenario(pred)
        measured = float(row["min_s"])
        closed, simulated = pred.eq7.iteration_s, sim.iteration_s
        out.append({
            "layout": row["layout"], "pp": int(row["pp"]), "mp": int(row["mp"]), "dp": int(row["dp"]),
            "recompute": row.get("recompute") or "none", "device": row.get("device", ""),
            "profile": pred.profile_name,
            "measured_s": measured, "measured_median_s": float(row["median_s"]),
            "closed_form_s": closed, "simulated_s": simulated,
            "closed_form_err_pct": _err(closed, measured), "simulated_err_pct": _err(simulated, measured),
            "warnings": list(pred.warnings),
        })
    return out


def render(table: list[dict]) -> str:
    lines = [f"{'layout':16} {'measured':>10} {'closed form':>12} {'err %':>7} {'simulated':>10} {'err %':>7}"]
    for r in table:
        lines.append(f"{r['layout']:16} {r['measured_s']:10.4f} {r['closed_form_s']:12.4f} "
                     f"{r['closed_form_err_pct']:+7.1f} {r['simulated_s']:10.4f} {r['simulated_err_pct']:+7.1f}")
    return "\n".join(lines)
