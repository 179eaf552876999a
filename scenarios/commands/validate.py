"""``trainsim validate``: predicted against measured H100 training (time and memory).

Each row of the measured table (validation/measured_h100.csv, written by
validation/train_gptneox.py on the GPU) is predicted through the bundled scenario
``gptneox-h100`` with that row's shape set by overrides, exactly as
``trainsim predict gptneox-h100 --set ...`` would. Prints the error per configuration
and the mean absolute percentage error; writes nothing unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from trainsim.operators import ConfigError

DEFAULT_MEASURED = Path(__file__).resolve().parents[2] / "validation" / "measured_h100.csv"
SHAPE_KEYS = {"hidden": "model.hidden", "heads": "model.heads", "layers": "model.layers",
              "seq_len": "model.seq_len", "vocab": "model.vocab", "micro_batch": "training.micro_batch",
              "micro_batches": "training.micro_batches", "recompute": "training.recompute"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="predicted vs measured iteration time and memory (H100 validation)")
    p.add_argument("--measured", default=str(DEFAULT_MEASURED), metavar="CSV",
                   help="measured table (default validation/measured_h100.csv)")
    p.add_argument("--scenario", default="gptneox-h100", help="scenario each row is predicted with")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="extra override for every row, e.g. --set profile.name=DIR (a held-out sample dir)")
    p.add_argument("--cache-dir", default=None, metavar="DIR", help="where fitted profiles are cached")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the report (Markdown, or JSON if .json)")
    p.add_argument("--measured-3d", default=None, metavar="CSV",
                   help="instead: 3D-parallel runs of validation/train_3d.py, predicted by Eq. 7 and the simulation")
    p.add_argument("--profile-3d", default="h200-sxm-bf16", metavar="NAME", help="profile for --measured-3d")
    p.add_argument("--host-gpus", type=int, default=None, help="GPUs of the host that measured --measured-3d")
    p.add_argument("--cluster-3d", default="dgx-h200", metavar="PRESET", help="cluster preset for --measured-3d")
    p.add_argument("--measured-multi", default=None, metavar="CSV",
                   help="instead: multi-GPU runs (validation/train_hf_parallel.py or train_3d.py tables), "
                        "simulated on the host they ran on")
    p.add_argument("--profile-multi", default=None, metavar="NAME",
                   help="profile for --measured-multi (default: the shipped one of each row's GPU)")
    p.add_argument("--cluster-multi", default=None, metavar="PRESET",
                   help="cluster preset for --measured-multi (default: hgx-h100 / hgx-h200 by each row's GPU)")
    p.add_argument("--attribute", action="store_true",
                   help="with --measured-multi: split each row's error into GPU compute and the rest, from the "
                        "kernel trace beside the table (<CSV>.kernels.jsonl)")
    p.add_argument("--published", default=None, metavar="CSV",
                   help="instead: published training throughput (e.g. validation/published_h100.csv, NVIDIA's "
                        "NeMo / Megatron-Bridge tables), each row simulated as its recipe runs")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no warnings (errors still print)")
    p.set_defaults(func=run)


def read_measured(path: str) -> list[dict[str, str]]:
    from trainsim.scenarios.csv_tables import read_csv_table

    _, rows = read_csv_table(path, "--measured")
    need = {"name", "iteration_s", "max_memory_allocated_bytes", *SHAPE_KEYS} - {"vocab"}
    if not rows:
        raise ConfigError("--measured", f"{path} holds no rows")
    missing = need - set(rows[0])
    if missing:
        raise ConfigError("--measured", f"{path} lacks columns {', '.join(sorted(missing))}")
    for i, row in enumerate(rows, start=2):  # line 1 is the header
        for col, blank_ok in (("iteration_s", False), ("max_memory_allocated_bytes", True)):
            cell = (row.get(col) or "").strip()
            if blank_ok and not cell:
                continue
            try:
                value = float(cell)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise ConfigError("--measured", f"{path} line {i}: {col} must be a positive number"
                                                f"{' or blank' if blank_ok else ''}, got {cell!r}")
    return rows


#: the shipped profile of each GPU a single-GPU table may have been measured on (its ``gpu`` column)
SHIPPED_PROFILE = {"h100-sxm": "h100-sxm-bf16", "h200": "h200-sxm-bf16"}


def gpu_overrides(row: dict[str, str], extra: list[str]) -> list[str]:
    """The row's own GPU and that GPU's shipped profile, unless ``--set`` names a profile or a GPU:
    an H200 table is priced as an H200, not with the scenario's H100 (a row of a GPU with no shipped
    profile keeps the scenario's)."""
    if any(e.startswith(("profile.name=", "cluster.gpu=", "cluster.preset=")) for e in extra):
        return []
    from trainsim.topology.hardware import gpu_for_device_name

    gpu = gpu_for_device_name(row.get("gpu", ""))
    if gpu not in SHIPPED_PROFILE:
        return []
    return [f"cluster.gpu={gpu}", f"profile.name={SHIPPED_PROFILE[gpu]}"]


def row_overrides(row: dict[str, str], extra: list[str]) -> list[str]:
    """The ``--set`` items that make a scenario one measured row: its shape, its GPU and that GPU's
    profile (:func:`gpu_overrides`), then ``extra``."""
    return [f"{key}={row[col]}" for col, key in SHAPE_KEYS.items() if row.get(col)] + \
        gpu_overrides(row, extra) + list(extra)


def predict_row(row: dict[str, str], scenario: str, extra: list[str], cache_dir: str | None) -> dict:
    from trainsim.operators.memory import memory_per_gpu
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario

    sc = load_scenario(scenario, row_overrides(row, extra))
    pred = predict(sc, cache_dir=cache_dir)
    iteration = pred.eq7.iteration_s
    cost = pred.costs.stages[0]
    accum = cost.grad_accum_s  # included in Eq. 7's update term
    mem = memory_per_gpu(sc.model, sc.training, sc.parallelism, pred.plans)
    measured_s = float(row["iteration_s"])
    # a table that timed iterations only (validation/throttle_onset_*: burst and sustained) leaves it blank
    measured_gib = int(float(row["max_memory_allocated_bytes"])) / 2**30 if row["max_memory_allocated_bytes"] else None
    return {
        "name": row["name"], "hidden": int(row["hidden"]), "heads": int(row["heads"]), "layers": int(row["layers"]),
        "seq_len": int(row["seq_len"]), "micro_batch": int(row["micro_batch"]),
        "micro_batches": int(row["micro_batches"]), "recompute": row["recompute"],
        "predicted_s": iteration, "measured_s": measured_s, "time_error_pct": 100.0 * (iteration / measured_s - 1),
        "predicted_gib": mem.total_gib, "measured_gib": measured_gib,
        "memory_error_pct": None if measured_gib is None else 100.0 * (mem.total_gib / measured_gib - 1),
        "fwd_s": cost.fwd_s, "bwd_s": cost.bwd_s, "recompute_s": cost.recompute_s, "optimizer_s": cost.optimizer_s,
        "grad_accum_s": accum, "profile": pred.profile_name,
        "host_band_s": None if pred.host_band is None else [pred.host_band.lo_s, pred.host_band.hi_s],
    }


def summarize(results: list[dict]) -> dict:
    from trainsim.scenarios.compose import gpu_paced, in_band

    n = len(results)
    mem = [abs(r["memory_error_pct"]) for r in results if r["memory_error_pct"] is not None]
    paced: list[float] = []
    hosted: list[float] = []
    for r in results:  # the rows the GPU paces, and those the host can
        (paced if gpu_paced(r.get("host_band_s"), r["predicted_s"]) else hosted).append(abs(r["time_error_pct"]))
    return {
        "configurations": n,
        "time_mape_pct": sum(abs(r["time_error_pct"]) for r in results) / n,
        "time_max_abs_error_pct": max(abs(r["time_error_pct"]) for r in results),
        "memory_configurations": len(mem),
        "memory_mape_pct": sum(mem) / len(mem) if mem else None,
        "memory_max_abs_error_pct": max(mem) if mem else None,
        # where the host can set the pace: the rows with a host band, and those measured inside it
        "host_band_configurations": sum(1 for r in results if r.get("host_band_s")),
        "inside_host_band": sum(1 for r in results if in_band(r.get("host_band_s"), r["measured_s"])),
        # the rows the GPU paces (no host band, or one under 2 % wide) and the rest, each's MAPE
        "gpu_paced_configurations": len(paced),
        "gpu_paced_mape_pct": sum(paced) / len(paced) if paced else None,
        "host_paced_configurations": len(hosted),
        "host_paced_mape_pct": sum(hosted) / len(hosted) if hosted else None,
    }


def render(results: list[dict], summary: dict) -> str:
    lines = ["| config | d | h | L | seq | b | m | recompute | predicted s | measured s | error | "
             "predicted GiB | measured GiB | error |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['hidden']} | {r['heads']} | {r['layers']} | {r['seq_len']} | {r['micro_batch']} | "
            f"{r['micro_batches']} | {r['recompute']} | {r['predicted_s']:.4f} | {r['measured_s']:.4f} | "
            f"{r['time_error_pct']:+.1f}% | {r['predicted_gib']:.2f} | "
            + ("– | – |" if r["measured_gib"] is None
               else f"{r['measured_gib']:.2f} | {r['memory_error_pct']:+.1f}% |"))
    lines.append("")
    profiles = ", ".join(sorted({r["profile"] for r in results}))
    if summary["memory_mape_pct"] is None:
        memory = " Peak memory: not in the table."
    else:
        memory = (f" Peak memory: mean abs error {summary['memory_mape_pct']:.2f}% "
                  f"(max {summary['memory_max_abs_error_pct']:.1f}%)")
        memory += "." if summary["memory_configurations"] == summary["configurations"] else \
            f" over the {summary['memory_configurations']} rows that measured it."
    lines.append(f"Iteration time: MAPE {summary['time_mape_pct']:.2f}% (max {summary['time_max_abs_error_pct']:.1f}%) "
                 f"over {summary['configurations']} configurations ({profiles})." + memory)
    if summary.get("host_band_configurations"):
        lines.append(f"Host band (each configuration on the fastest and the slowest host measured for the profile): "
                     f"{summary['host_band_configurations']} have one, the measurement is inside it on "
                     f"{summary['inside_host_band']}.")
    if summary.get("gpu_paced_configurations") and summary.get("host_paced_configurations"):
        lines.append(f"The GPU paces {summary['gpu_paced_configurations']} (no host band, or one under 2 % wide): "
                     f"MAPE {summary['gpu_paced_mape_pct']:.2f}%; the host can pace the other "
                     f"{summary['host_paced_configurations']}: {summary['host_paced_mape_pct']:.2f}%.")
    return "\n".join(lines)


def run_3d(args: argparse.Namespace) -> int:
    from trainsim.scenarios import compare_3d
    from trainsim.scenarios.progress import Progress

    measured = compare_3d.read_measured(args.measured_3d)
    with Progress("validate", len(measured), unit="runs", quiet=args.quiet) as bar:
        table = compare_3d.rows(args.measured_3d, args.profile_3d, args.host_gpus, cluster=args.cluster_3d,
                                progress=bar.update, overrides=args.overrides)
    return _report(args, {"summary": compare_3d.summary(table), "layouts": table}, compare_3d.render, table)


def _report(args: argparse.Namespace, payload: dict, render, table: list[dict]) -> int:
    """Print a validation table (``--json``: the payload) and its rows' warnings in one block."""
    from trainsim.scenarios.commands.common import print_json, warn

    if args.json:
        print_json(payload)
    else:
        print(render(table))
    warn(dict.fromkeys(w for r in table for w in r.get("warnings", [])), quiet=args.quiet)
    return 0


def run_multi(args: argparse.Namespace) -> int:
    from trainsim.scenarios import compare_multi
    from trainsim.scenarios.commands.common import print_json, warn
    from trainsim.scenarios.progress import Progress

    _, measured = compare_multi.read_table(args.measured_multi)  # a bad table fails before any work
    kernels = compare_multi.read_kernels(args.measured_multi) if args.attribute else None
    with Progress("validate", len(measured), unit="runs", quiet=args.quiet) as bar:
        table = compare_multi.rows(args.measured_multi, args.profile_multi, args.cluster_multi,
                                   cache_dir=args.cache_dir, progress=bar.update, overrides=args.overrides)
    attribution = compare_multi.attribute(table, kernels) if kernels is not None else None
    if args.json:
        print_json({"summary": compare_multi.summary(table), "runs": table,
                    **({"attribution": attribution} if attribution is not None else {})})
    else:
        print(compare_multi.render(table))
        if attribution is not None:
            print(compare_multi.render_attribution(attribution))
    warn(dict.fromkeys(w for r in table for w in r.get("warnings", [])), quiet=args.quiet)
    return 0


def run_published(args: argparse.Namespace) -> int:
    from trainsim.scenarios import published
    from trainsim.scenarios.progress import Progress

    rows = published.read_published(args.published)  # a bad table fails before any work
    with Progress("validate", len(rows), unit="runs", quiet=args.quiet) as bar:
        table = published.predict_rows(rows, cache_dir=args.cache_dir, progress=bar.update,
                                       overrides=args.overrides)
    return _report(args, {"summary": published.summary(table), "runs": table}, published.render, table)


def run(args: argparse.Namespace) -> int:
    import warnings

    if args.published:
        return run_published(args)
    if args.measured_multi:
        return run_multi(args)
    if args.measured_3d:
        return run_3d(args)
    rows = read_measured(args.measured)
    if args.out is not None:
        from trainsim.scenarios.commands.common import check_writable

        check_writable(args.out, "--out")
    from trainsim.scenarios.progress import Progress

    results = []
    with warnings.catch_warnings(), Progress("validate", len(rows), unit="configurations", quiet=args.quiet) as bar:
        warnings.simplefilter("ignore")  # profile data quirks are reported by `trainsim profile`
        for r in rows:
            results.append(predict_row(r, args.scenario, args.overrides, args.cache_dir))
            bar.update()
    summary = summarize(results)
    text = json.dumps({"summary": summary, "configurations": results}, indent=2) if args.json \
        else render(results, summary)
    print(text)
    if args.out is not None:
        out = Path(args.out)
        body = json.dumps({"summary": summary, "configurations": results}, indent=2) if out.suffix == ".json" \
            else render(results, summary)
        from trainsim.scenarios.commands.common import write_atomic

        write_atomic(out, lambda tmp: Path(tmp).write_text(body + "\n"))
    return 0
