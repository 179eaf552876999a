"""Predicted against measured multi-GPU iteration times (``trainsim validate --measured-multi CSV``).

Reads either trainer's table and, per row, builds the scenario that describes that run:

* ``validation/train_hf_parallel.py`` (PyTorch-native parallelism on Hugging Face GPT-NeoX,
  columns ``layout,world,dp,fsdp,tp,pp,schedule,...``): framework ``hf``; ``tp`` is the
  scenario's ``mp`` (DTensor), ``pp`` its pipeline (torch.distributed.pipelining), ``dp`` DDP;
* ``validation/train_3d.py`` (Megatron-style, columns ``layout,pp,mp,dp,...,seq``): the scenario
  of :func:`scenarios.compare_3d.scenario_mapping`.

The cluster is the host the row ran on: ``hgx-h100`` or ``hgx-h200`` (from the ``device``
column) with ``gpus_per_node`` = the layout's GPUs, so every group is one NVLink node; the
profile is the same GPU's shipped one (``h100-sxm-bf16`` / ``h200-sxm-bf16``) unless given.
Each row is simulated (realistic mode, seed 0) and compared with the measured minimum over
its timed iterations (the statistic of the one-GPU validation).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.csv_tables import read_csv_table

HF_COLUMNS = ("layout", "world", "dp", "tp", "pp", "hidden", "heads", "layers", "seq_len", "micro_batch",
              "micro_batches", "min_s", "median_s", "device")
M3D_COLUMNS = ("layout", "pp", "mp", "dp", "hidden", "heads", "layers", "seq", "micro_batch", "micro_batches",
               "min_s", "median_s", "device")
GPUS = {"H100": ("hgx-h100", "h100-sxm-bf16"), "H200": ("hgx-h200", "h200-sxm-bf16")}


def read_table(path: str | os.PathLike) -> tuple[str, list[dict[str, str]]]:
    """(``"hf"`` or ``"3d"``, rows) of a measured table; a bad file is one ConfigError naming it."""
    p = Path(path)
    fields, rows = read_csv_table(p, "--measured-multi")
    header = set(fields)
    kind = "hf" if "tp" in header else "3d"
    need = HF_COLUMNS if kind == "hf" else M3D_COLUMNS
    missing = [c for c in need if c not in header]
    if missing:
        raise ConfigError(f"{p}:1", f"missing columns: {', '.join(missing)} (neither "
                                    "train_hf_parallel.py's nor train_3d.py's table)")
    if not rows:
        raise ConfigError(str(p), "holds no rows")
    ints = [c for c in need if c not in ("layout", "device", "min_s", "median_s")]
    for i, row in enumerate(rows, start=2):
        for c in (*ints, "min_s", "median_s"):
            if c == "median_s" and not row.get(c):  # a table may give the minimum alone
                continue
            try:
                ok = (int(row[c]) >= 1) if c in ints else (float(row[c]) > 0)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ConfigError(f"{p}:{i}", f"column {c}: {row[c]!r} is not a positive number")
    return kind, rows


def gpu_of(row: dict[str, str], where: str) -> str:
    for name in GPUS:
        if name in row.get("device", ""):
            return name
    raise ConfigError(where, f"device {row.get('device')!r}: no shipped cluster/profile for it "
                             f"(known: {', '.join(GPUS)}); pass --profile-multi and --cluster-multi")


def scenario_mapping(kind: str, row: dict[str, str], profile: str, cluster: str) -> dict:
    """The scenario of one measured row (see the module docstring)."""
    if kind == "3d":
        from trainsim.scenarios.compare_3d import scenario_mapping as m3d

        gpus = int(row["pp"]) * int(row["mp"]) * int(row["dp"])
        return m3d(row, profile, host_gpus=gpus, cluster=cluster)
    fsdp = int(row.get("fsdp") or 1)
    dp = int(row["dp"]) * fsdp  # FSDP2 is data parallelism with ZeRO stage 3
    gpus = int(row["pp"]) * int(row["tp"]) * dp
    return {
        "name": f"measured-{row['layout']}-{row.get('name', '')}",
        "description": "validation/train_hf_parallel.py row",
        "model": {"name": "gptneox", "hidden": int(row["hidden"]), "heads": int(row["heads"]),
                  "layers": int(row["layers"]), "seq_len": int(row["seq_len"]),
                  "vocab": int(row.get("vocab") or 50432), "norm": "layernorm", "attention": "flash",
                  "rotary": True},
        "training": {"micro_batch": int(row["micro_batch"]), "micro_batches": int(row["micro_batches"]),
                     "precision": "bf16", "recompute": "none", "zero_stage": 3 if fsdp > 1 else 0,
                     "framework": "hf"},
        "parallelism": {"pp": int(row["pp"]), "mp": int(row["tp"]), "dp": dp,
                        "schedule": row["schedule"] if row.get("schedule") in ("1f1b", "gpipe") else "1f1b"},
        "cluster": {"preset": cluster, "gpus_per_node": gpus},
        "profile": {"name": profile},
        "simulation": {"mode": "realistic", "seed": 0},
    }


def rows(path: str | os.PathLike, profile: str | None = None, cluster: str | None = None,
         cache_dir: str | None = None, progress: Callable[[int], object] | None = None,
         overrides: Sequence[str] = ()) -> list[dict]:
    """One dict per measured row: layout, shape, simulated and closed-form seconds, measured minimum and
    median, errors in percent, the time's breakdown and the warnings of its prediction. ``overrides``:
    ``--set`` items for every row."""
    from trainsim.scenarios.compose import predict, simulate_prediction
    from trainsim.scenarios.schema import apply_overrides, scenario_from_mapping

    kind, table = read_table(path)
    out = []
    for i, row in enumerate(table, start=2):
        where = f"{path}:{i}"
        base = {"layout": row["layout"], "shape": row.get("name") or
                f"d{row['hidden']}-L{row['layers']}-b{row['micro_batch']}", "device": row["device"],
                "measured_s": float(row["min_s"]),
                "measured_median_s": float(row["median_s"]) if row.get("median_s") else None}
        if "_skip" in row:
            out.append({**base, "skipped": row["_skip"]})
            if progress:
                progress(1)
            continue
        gpu = gpu_of(row, where) if profile is None or cluster is None else ""
        sc = scenario_from_mapping(apply_overrides(scenario_mapping(kind, row, profile or GPUS[gpu][1],
                                                                    cluster or GPUS[gpu][0]), overrides), name=where)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pred = predict(sc, cache_dir=cache_dir)
            sim = simulate_prediction(pred)
        simulated, closed = sim.iteration_s, pred.eq7.iteration_s
        meas = base["measured_s"]
        mem = pred.memory_gib_per_gpu
        meas_mem = float(row["max_mem_gib"]) if row.get("max_mem_gib") else None
        out.append({**base, "profile": pred.profile_name, "simulated_s": simulated, "closed_form_s": closed,
                    "predicted_gib": mem, "measured_gib": meas_mem,
                    "memory_err_pct": 100.0 * (mem / meas_mem - 1) if mem and meas_mem else None,
                    "simulated_err_pct": 100.0 * (simulated / meas - 1),
                    "closed_form_err_pct": 100.0 * (closed / meas - 1), "breakdown": dict(sim.breakdown),
                    "notes": list(pred.costs.notes),
                    "host_band_s": (list(pred.host_band.scaled(closed, simulated))
                                    if pred.host_band is not None else None),
                    "host_factors": ([pred.host_band.lo_factor, pred.host_band.hi_factor]
                                     if pred.host_band is not None else None),
                    "warnings": list(dict.fromkeys([*pred.warnings, *(str(w.message) for w in caught)]))})
        if progress:
            progress(1)
    return out


def summary(table: list[dict]) -> dict:
    done = [r for r in table if "skipped" not in r]
    if not done:
        return {"rows": len(table), "predicted": 0}
    errs = [abs(r["simulated_err_pct"]) for r in done]
    mems = [abs(r["memory_err_pct"]) for r in done if r.get("memory_err_pct") is not None]
    eq7 = [abs(r["closed_form_err_pct"]) for r in done]
    # against the median of the measured iterations too: host-bound layouts wander 6-24 % above their
    # fastest iteration within one run (docs/multi_gpu.md), GPU-bound ones 0.3-3 %
    med = [abs(100.0 * (r["simulated_s"] / r["measured_median_s"] - 1)) for r in done if r.get("measured_median_s")]
    from trainsim.scenarios.compose import gpu_paced, in_band

    banded = [r for r in done if r.get("host_band_s")]
    inside = [r for r in banded if in_band(r["host_band_s"], r["measured_s"])]
    by_layout: dict[str, list[float]] = {}
    paced_by_layout: dict[str, list[float]] = {}
    for r in done:
        by_layout.setdefault(r["layout"], []).append(r["simulated_err_pct"])
        if gpu_paced(r.get("host_band_s"), r["simulated_s"]):
            paced_by_layout.setdefault(r["layout"], []).append(abs(r["simulated_err_pct"]))
    paced = [e for v in paced_by_layout.values() for e in v]
    # per layout: its MAPE and its mean signed error (a bias the runtime's model has, where the MAPE
    # alone cannot tell a bias from one machine's host being fast or slow), and its GPU-paced rows' MAPE
    # (what the model of the GPU, without the machine's host, gets)
    layouts = {lay: {"rows": len(v), "simulated_mape_pct": sum(abs(e) for e in v) / len(v),
                     "simulated_mean_err_pct": sum(v) / len(v),
                     "gpu_paced_rows": len(paced_by_layout.get(lay, ())),
                     "gpu_paced_mape_pct": (sum(paced_by_layout[lay]) / len(paced_by_layout[lay])
                                            if lay in paced_by_layout else None)}
               for lay, v in by_layout.items()}
    return {"rows": len(table), "predicted": len(done), "simulated_mape_pct": sum(errs) / len(errs),
            "layouts": layouts,
            "host_band_rows": len(banded), "inside_host_band": len(inside),
            # the rows the GPU paces (no host band, or one under 2 % wide) and their MAPE
            "gpu_paced_rows": len(paced), "gpu_paced_mape_pct": sum(paced) / len(paced) if paced else None,
            "simulated_max_abs_err_pct": max(errs), "closed_form_mape_pct": sum(eq7) / len(eq7),
            "closed_form_max_abs_err_pct": max(eq7), "skipped": len(table) - len(done),
            "memory_mape_pct": sum(mems) / len(mems) if mems else None,
            "simulated_vs_median_mape_pct": sum(med) / len(med) if med else None, "rows_with_median": len(med)}


def render(table: list[dict]) -> str:
    lines = [f"{'layout':12} {'shape':14} {'measured s':>10} {'simulated':>10} {'err %':>7} {'Eq. 7':>9} "
             f"{'err %':>7} {'GiB meas':>9} {'GiB est':>8} {'err %':>7}"]
    for r in table:
        if "skipped" in r:
            lines.append(f"{r['layout']:12} {r['shape']:14} {r['measured_s']:10.4f}   skipped: {r['skipped']}")
            continue
        mem = (f" {r['measured_gib']:9.2f} {r['predicted_gib']:8.2f} {r['memory_err_pct']:+7.1f}"
               if r.get("memory_err_pct") is not None else "")
        lines.append(f"{r['layout']:12} {r['shape']:14} {r['measured_s']:10.4f} {r['simulated_s']:10.4f} "
                     f"{r['simulated_err_pct']:+7.1f} {r['closed_form_s']:9.4f} {r['closed_form_err_pct']:+7.1f}{mem}")
    s = summary(table)
    if s["predicted"]:
        lines.append(f"\n{s['predicted']} rows predicted: simulated MAPE {s['simulated_mape_pct']:.1f} % "
                     f"(max {s['simulated_max_abs_err_pct']:.1f} %), Eq. 7 MAPE {s['closed_form_mape_pct']:.1f} % "
                     f"(max {s['closed_form_max_abs_err_pct']:.1f} %)"
                     + (f"; peak memory MAPE {s['memory_mape_pct']:.1f} %" if s["memory_mape_pct"] is not None else "")
                     + (f"; {s['skipped']} skipped" if s["skipped"] else ""))
        if len(s["layouts"]) > 1:
            lines.append("per layout, simulated MAPE (mean error): " + ", ".join(
                f"{lay} {v['simulated_mape_pct']:.1f} % ({v['simulated_mean_err_pct']:+.1f} %)"
                for lay, v in s["layouts"].items()))
        if s["simulated_vs_median_mape_pct"] is not None:
            lines.append(f"against the median iteration ({s['rows_with_median']} rows): simulated MAPE "
                         f"{s['simulated_vs_median_mape_pct']:.1f} % (the table above is against the fastest)")
        if s["host_band_rows"]:
            lo = min(r["host_factors"][0] for r in table if r.get("host_factors"))
            hi = max(r["host_factors"][1] for r in table if r.get("host_factors"))
            lines.append(f"host band (each row on the fastest and the slowest host measured for the profile, "
                         f"x{lo:.2f} to x{hi:.2f}): {s['host_band_rows']} rows have one, the measurement is inside "
                         f"it on {s['inside_host_band']}")
        if s["gpu_paced_rows"] and s["gpu_paced_rows"] < s["predicted"]:
            per = [f"{lay} {v['gpu_paced_rows']}, {v['gpu_paced_mape_pct']:.1f} %"
                   for lay, v in s["layouts"].items() if v["gpu_paced_rows"]]
            lines.append(f"the GPU paces {s['gpu_paced_rows']} rows (no host band, or one under 2 % wide): simulated "
                         f"MAPE {s['gpu_paced_mape_pct']:.1f} %" + (f" ({'; '.join(per)})" if len(per) > 1 else ""))
    else:
        lines.append("\nno row could be predicted")
    return "\n".join(lines)


def read_kernels(path: str | os.PathLike) -> dict[tuple[str, str], dict]:
    """The kernel summaries train_hf_parallel.py --kernels wrote beside a table (``<csv>.kernels.jsonl``,
    or with the ``.csv`` dropped), by (layout, shape); a missing or bad file is one ConfigError naming it."""
    p = Path(f"{path}.kernels.jsonl")
    if not p.is_file():
        p = Path(path).with_suffix(".kernels.jsonl")
    out: dict[tuple[str, str], dict] = {}
    try:
        lines = p.read_text().splitlines()
    except OSError:
        raise ConfigError("--attribute", f"no kernel trace {p} beside the table "
                                         "(validation/train_hf_parallel.py --kernels writes it)") from None
    for i, line in enumerate(lines, start=1):
        try:
            r = json.loads(line)
            out[(r["layout"], r["name"])] = {k: float(r[k]) for k in ("busy_s", "compute_busy_s", "wall_s")}
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{p}:{i}", f"not a kernel summary: {e}") from None
    return out


def attribute(table: list[dict], kernels: dict[tuple[str, str], dict]) -> list[dict]:
    """Where each row's error sits: GPU compute against the rest of the iteration.

    Measured: the compute kernels' busy time (optimizer included, NCCL excluded) of the profiled
    iteration, and the rest of the measured minimum (exposed communication, host time, waits).
    Simulated: the critical replica's compute and optimizer, and the rest of its iteration
    (exposed MP/CP/PP/DP communication, host excess, idle). Their two differences add up to the
    row's error in seconds.
    """
    out = []
    for r in table:
        k = kernels.get((r["layout"], r["shape"]))
        if "skipped" in r or k is None:
            continue
        b = r["breakdown"]
        sim_compute = b.get("compute", 0.0) + b.get("optimizer", 0.0)
        meas_compute = k["compute_busy_s"]
        d_compute = sim_compute - meas_compute
        d_rest = (r["simulated_s"] - sim_compute) - (r["measured_s"] - meas_compute)
        rest = {key: v for key, v in b.items() if key not in ("compute", "optimizer") and v > 0}
        out.append({"layout": r["layout"], "shape": r["shape"], "err_pct": r["simulated_err_pct"],
                    "measured_compute_s": meas_compute, "simulated_compute_s": sim_compute,
                    "measured_rest_s": r["measured_s"] - meas_compute,
                    "simulated_rest_s": r["simulated_s"] - sim_compute,
                    "compute_gap_s": d_compute, "rest_gap_s": d_rest,
                    "largest": "compute" if abs(d_compute) >= abs(d_rest) else "rest",
                    "simulated_rest": {str(key): v for key, v in rest.items()}})
    return out


def render_attribution(rows: list[dict]) -> str:
    lines = ["\nwhere the error sits (seconds; measured compute from the kernel trace, rest = the iteration less it):",
             f"{'layout':12} {'shape':14} {'err %':>7} {'compute meas':>12} {'sim':>7} {'gap':>7}   "
             f"{'rest meas':>9} {'sim':>7} {'gap':>7}   simulated rest"]
    for a in rows:
        rest = ", ".join(f"{k} {v:.3f}" for k, v in sorted(a["simulated_rest"].items(), key=lambda kv: -kv[1]))
        lines.append(f"{a['layout']:12} {a['shape']:14} {a['err_pct']:+7.1f} {a['measured_compute_s']:12.4f} "
                     f"{a['simulated_compute_s']:7.4f} {a['compute_gap_s']:+7.4f}   {a['measured_rest_s']:9.4f} "
                     f"{a['simulated_rest_s']:7.4f} {a['rest_gap_s']:+7.4f}   {rest or '-'}")
    if not rows:
        lines.append("no row has a kernel summary")
    return "\n".join(lines)

