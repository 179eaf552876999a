"""Predicted (Eq. 7 closed form and simulation) against measured 3D-parallel iteration times.

Reads the rows ``validation/train_3d.py`` appends (``validation/measured_3d.csv``) and, for
each layout, builds the scenario that describes that run:

* model: the harness's decoder (``hidden``, ``heads``, ``layers``, ``seq``, ``vocab``),
  LayerNorm, one fused attention kernel (``scaled_dot_product_attention``: ``flash``), no
  rotary embedding, 2 MP all-reduces per layer forward and 2 backward;
* training: ``micro_batch``, ``micro_batches``, ``recompute``, bf16, ZeRO stage 0 (the
  harness all-reduces the gradients and keeps full optimizer state), Megatron decomposition,
  ``grad_accumulation: autograd`` (the harness accumulates into bf16 ``.grad`` and steps fp32
  master copies, not Megatron-Core's fused accumulation);
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
from collections.abc import Sequence
from pathlib import Path

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.progress import ProgressCallback

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
                     "framework": "megatron", "kernels": "eager",  # train_3d.py runs PyTorch eager ops
                     "grad_accumulation": "autograd"},  # and plain PyTorch mixed precision (fp32 masters)
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


def layout_of(row: dict) -> str:
    """``pp2-mp4-dp1``: the layout the row's ``pp``, ``mp`` and ``dp`` columns describe (what is simulated)."""
    return f"pp{int(row['pp'])}-mp{int(row['mp'])}-dp{int(row['dp'])}"


def rows(measured_csv: str | os.PathLike = DEFAULT_CSV, profile_name: str = "h200-sxm-bf16",
         host_gpus: int | None = None, reference_data: str | None = None, cluster: str = "dgx-h200",
         progress: ProgressCallback | None = None, overrides: Sequence[str] = ()) -> list[dict]:
    """One dict per measured row: its layout and shape, closed form, simulated and measured seconds,
    errors in percent. ``progress(1)`` after each row; ``overrides``: ``--set`` items for every row."""
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.compose import simulate_prediction as simulate_scenario
    from trainsim.scenarios.schema import apply_overrides, scenario_from_mapping

    out = []
    for row in read_measured(measured_csv):
        layout = layout_of(row)
        sc = scenario_from_mapping(apply_overrides(scenario_mapping(row, profile_name, host_gpus, reference_data,
                                                                    cluster), overrides), name=f"measured-{layout}")
        pred = predict(sc, reference_data=reference_data)
        sim = simulate_scenario(pred)
        measured = float(row["min_s"])
        closed, simulated = pred.eq7.iteration_s, sim.iteration_s
        out.append({
            "layout": layout, "pp": int(row["pp"]), "mp": int(row["mp"]), "dp": int(row["dp"]),
            "hidden": int(row["hidden"]), "heads": int(row["heads"]), "layers": int(row["layers"]),
            "seq": int(row["seq"]), "micro_batch": int(row["micro_batch"]),
            "micro_batches": int(row["micro_batches"]),
            "recompute": row.get("recompute") or "none", "device": row.get("device", ""),
            "profile": pred.profile_name,
            "measured_s": measured, "measured_median_s": float(row["median_s"]),
            "closed_form_s": closed, "simulated_s": simulated,
            "closed_form_err_pct": _err(closed, measured), "simulated_err_pct": _err(simulated, measured),
            "warnings": list(pred.warnings),
        })
        if progress is not None:
            progress(1)
    return out


def summary(table: list[dict]) -> dict:
    """MAPE and largest absolute error (percent) of the simulation and of Eq. 7 over the rows."""
    n = len(table)
    if not n:
        return {"rows": 0}
    sim = [abs(r["simulated_err_pct"]) for r in table]
    eq7 = [abs(r["closed_form_err_pct"]) for r in table]
    return {"rows": n, "simulated_mape_pct": sum(sim) / n, "simulated_max_abs_err_pct": max(sim),
            "closed_form_mape_pct": sum(eq7) / n, "closed_form_max_abs_err_pct": max(eq7)}


def render(table: list[dict]) -> str:
    lines = [f"{'layout':12} {'d':>5} {'L':>3} {'seq':>5} {'b':>3} {'m':>3} {'recompute':9} "
             f"{'measured':>9} {'Eq. 7':>8} {'err %':>6} {'simulated':>9} {'err %':>6}"]
    for r in table:
        lines.append(f"{r['layout']:12} {r['hidden']:5d} {r['layers']:3d} {r['seq']:5d} {r['micro_batch']:3d} "
                     f"{r['micro_batches']:3d} {r['recompute']:9} {r['measured_s']:9.4f} {r['closed_form_s']:8.4f} "
                     f"{r['closed_form_err_pct']:+6.1f} {r['simulated_s']:9.4f} {r['simulated_err_pct']:+6.1f}")
    s = summary(table)
    if s["rows"]:
        lines.append(f"\n{s['rows']} runs: simulation MAPE {s['simulated_mape_pct']:.1f} % "
                     f"(max {s['simulated_max_abs_err_pct']:.1f} %), Eq. 7 MAPE {s['closed_form_mape_pct']:.1f} % "
                     f"(max {s['closed_form_max_abs_err_pct']:.1f} %)")
    return "\n".join(lines)
