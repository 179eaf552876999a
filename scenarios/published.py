"""Predicted against published training throughput (``trainsim validate --published CSV``).

Each row of the table is one published pre-training benchmark (NVIDIA's NeMo and Megatron-Bridge
performance tables on DGX H100, Megatron-LM's SC21 weak-scaling table and BLOOM's training log on
A100s: model, GPUs, precision, global and micro-batch, sequence, TP, PP, CP, virtual stages, FSDP,
and the throughput they report, as tokens per second per GPU or as the paper's teraFLOP/s per GPU,
one of the two per row; the ``source`` column names the document and its commit). The row becomes
the scenario the published recipe runs. Recipe ``megatron-core`` (the default; NeMo and Megatron-Bridge):

* framework megatron (Megatron-Core), the row's kernels (``fused``: Transformer Engine's);
* tensor parallelism with sequence parallelism and its communication overlapped with the GEMMs
  (the recipes' ``tp_comm_overlap``), the distributed optimizer with the gradient reduce-scatter
  and the parameter all-gather overlapped, no activation recompute;
* the gradient buffer in the precision of the source's performance recipes
  (:data:`GRAD_REDUCE_IN_FP32`; Megatron-Core's fp32 default where the source does not say);
* interleaved 1F1B when ``vp`` > 1; ``dp`` = GPUs / (TP x PP x CP), micro-batches per step =
  global batch / (micro-batch x dp);
* Megatron's layer split, or the balanced (``deepspeed``) one where the row's ``split`` says so
  (Llama 3.1 405B's 126 layers over 8 stages: Megatron-Core counts the embedding and the loss as
  layers, which the interleaved schedule here cannot express);
* the cluster preset of the ``system`` column and its GPU's shipped profile (``--set`` may name
  another, e.g. ``profile.name=reference:Perlmutter``).

Recipe ``megatron-lm-2021`` (Narayanan et al. 2021, the ``sc21`` scripts): the precision of the row
(fp16) with full activation recomputation, no sequence parallelism, no distributed optimizer (ZeRO
stage 0), the model's unfused attention core; the ``ddp`` column says how gradients are reduced:
``torch`` is PyTorch DDP (25 MB buckets overlapped with the backward), ``local`` Megatron's
LocalDDP (one all-reduce of the flat buffer after the last backward).

Recipe ``megatron-deepspeed-2022`` (BigScience's Megatron-DeepSpeed, BLOOM): the row's precision
with full activation recomputation (DeepSpeed's), no sequence parallelism, the BF16 optimizer's
ZeRO stage 1 (optimizer state sharded over the data-parallel group), the gradients all-reduced
in DeepSpeed's 5e8-element buckets after the pipeline's last backward, not overlapped.

The prediction is simulated (realistic mode, seed 0); its throughput is global batch x sequence /
iteration time / GPUs; the error is predicted / published - 1.
"""

from __future__ import annotations

import os
import statistics
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.csv_tables import read_csv_table

COLUMNS = ("id", "source", "system", "model", "gpus", "precision", "gbs", "mbs", "seq_len", "tp", "pp", "cp",
           "vp", "fsdp", "split", "kernels")
#: the published throughput: exactly one of these columns
METRICS = ("tokens_per_s_per_gpu", "tflops_per_gpu")
INTS = ("gpus", "gbs", "mbs", "seq_len", "tp", "pp", "cp", "vp", "fsdp")
RECIPES = ("megatron-core", "megatron-lm-2021", "megatron-deepspeed-2022")
#: the DeepSpeed ZeRO reduce bucket's default (reduce_bucket_size, 5e8 elements)
DEEPSPEED_BUCKET_ENTRIES = 500_000_000
DDP_IMPLS = ("torch", "local")
#: PyTorch DDP's default bucket_cap_mb (25 MiB) in fp16 gradient entries
TORCH_DDP_BUCKET_ENTRIES = 25 * 2**20 // 2
#: one bucket holding every gradient (Megatron's LocalDDP: one flat buffer)
ONE_BUCKET_ENTRIES = 2**40
#: source -> the distributed optimizer's ``grad_reduce_in_fp32`` in its performance recipes, where
#: it differs from Megatron-Core's fp32 default. NeMo 24.07's performance configurations
#: (NeMo-Framework-Launcher, launcher_scripts/conf/training/*_performance.yaml) run Apex's
#: distributed_fused_adam with ``grad_sync_dtype: bf16``: bf16 gradient buffers and reduce-scatter.
#: Megatron-Bridge's performance helpers have set it both ways over their history (not pinned:
#: the fp32 default is kept for the bridge rows).
GRAD_REDUCE_IN_FP32 = {"nemo-24.07": False}
#: system column -> (cluster preset, profile a user of that system would pick: the shipped one of
#: its GPU; the A100 has none shipped, so the datasheet transfer of the H100 efficiencies)
SYSTEMS = {"dgx-h100": ("dgx-h100", "h100-sxm-bf16"), "dgx-h200": ("dgx-h200", "h200-sxm-bf16"),
           "dgx-a100": ("dgx-a100", "transfer:a100-sxm4-80gb")}
#: models the tables name that have no preset: a preset's architecture with these shapes
#: (NeMo's GPT-3 5B / 20B configs; Llama 2 13B's Hugging Face card)
DERIVED_MODELS: dict[str, dict[str, Any]] = {
    "gpt3-5b": {"preset": "gpt3-175b", "hidden": 4096, "heads": 32, "layers": 24, "ffn_hidden": 16384},
    "gpt3-20b": {"preset": "gpt3-175b", "hidden": 6144, "heads": 48, "layers": 44, "ffn_hidden": 24576},
    "llama2-13b": {"preset": "llama2-7b", "hidden": 5120, "heads": 40, "kv_heads": 40, "layers": 40,
                   "ffn_hidden": 13824},
    # BLOOM 176B (bigscience-workshop/bigscience train/tr11-176B-ml/README.md): 70 layers, hidden
    # 14336, 112 heads, MLP 4h with GeLU, ALiBi positions, tied embeddings with a 250,880-token
    # (padded) vocabulary, LayerNorm, biases; Megatron's fused softmax outside flash attention and
    # Megatron-LM's inherited dropout (attention and hidden 0.1). The embedding LayerNorm (one more
    # norm on the first stage) is not priced.
    "bloom-176b": {"preset": "gpt3-175b", "hidden": 14336, "heads": 112, "layers": 70, "ffn_hidden": 4 * 14336,
                   "vocab": 250880, "position": "alibi", "attention": "fused_softmax", "attention_dropout": True},
}
#: Megatron-LM's SC21 weak-scaling GPTs (run_table_1.sh): hidden, heads, layers; vocabulary 51,200,
#: MLP 4h, learned positions, the unfused attention core of 2021 (no flash attention yet) with
#: Megatron's default dropout (--attention-dropout and --hidden-dropout 0.1, which the scripts keep)
for _name, (_h, _a, _l) in {"1.7b": (2304, 24, 24), "3.6b": (3072, 32, 30), "7.5b": (4096, 32, 36),
                            "18b": (6144, 48, 40), "39b": (8192, 64, 48), "76b": (10240, 80, 60),
                            "145b": (12288, 96, 80), "310b": (16384, 128, 96), "530b": (20480, 128, 105),
                            "1t": (25600, 160, 128)}.items():
    DERIVED_MODELS[f"megatron-{_name}"] = {"preset": "gpt3-175b", "hidden": _h, "heads": _a, "layers": _l,
                                           "ffn_hidden": 4 * _h, "vocab": 51200, "attention": "fused_softmax",
                                           "attention_dropout": True}


def sc21_flops_per_token(model: dict[str, Any], seq_len: int) -> float:
    """FLOPs per token as Narayanan et al. 2021 count them (their appendix, full recomputation
    included): 96 l h^2 (1 + s/(6h) + V/(16 l h)), the iteration's 96 B s l h^2 (...) over B s tokens."""
    h, layers, vocab = model["hidden"], model["layers"], model["vocab"]
    return 96.0 * layers * h * h * (1 + seq_len / (6 * h) + vocab / (16 * layers * h))


def read_published(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a published-runs table, typed; a bad file or cell is one ConfigError naming it."""
    p = Path(path)
    fields, raw = read_csv_table(p, "--published", comments=True)
    missing = [c for c in COLUMNS if c not in fields]
    if missing:
        raise ConfigError(f"{p}:1", f"missing columns: {', '.join(missing)}")
    metrics = [c for c in METRICS if c in fields]
    if not metrics:
        raise ConfigError(f"{p}:1", f"needs a throughput column: {' or '.join(METRICS)}")
    if not raw:
        raise ConfigError(str(p), "holds no rows")
    rows = []
    for i, r in enumerate(raw, start=2):
        row: dict[str, Any] = dict(r)
        where = f"{p}, row {r.get('id') or i}"
        filled = [c for c in metrics if (r.get(c) or "").strip()]
        if len(filled) != 1:
            raise ConfigError(where, f"needs exactly one throughput of {', '.join(metrics)}, got "
                                     f"{', '.join(filled) or 'none'}")
        metric = filled[0]
        try:
            for c in INTS:
                row[c] = int(r[c])
            published = float(r[metric])
        except (TypeError, ValueError):
            raise ConfigError(where, "gpus, gbs, mbs, seq_len, tp, pp, cp, vp and fsdp must be integers, "
                                     f"{metric} a number") from None
        if row["system"] not in SYSTEMS:
            raise ConfigError(where, f"unknown system {row['system']!r}; known: {', '.join(SYSTEMS)}")
        row["recipe"] = r.get("recipe") or RECIPES[0]
        if row["recipe"] not in RECIPES:
            raise ConfigError(where, f"unknown recipe {row['recipe']!r}; known: {', '.join(RECIPES)}")
        row["ddp"] = r.get("ddp") or ""
        if row["recipe"] == "megatron-lm-2021" and row["ddp"] not in DDP_IMPLS:
            raise ConfigError(where, f"recipe megatron-lm-2021 needs ddp {' or '.join(DDP_IMPLS)}, got "
                                     f"{row['ddp']!r}")
        if min(row[c] for c in INTS if c != "fsdp") < 1 or not published > 0:
            raise ConfigError(where, "sizes and the throughput must be positive")
        row["published_metric"], row["published_value"] = metric, published
        if metric == "tflops_per_gpu":
            model = DERIVED_MODELS.get(row["model"])
            if row["recipe"] != "megatron-lm-2021" or model is None or "vocab" not in model:
                raise ConfigError(where, "tflops_per_gpu is Narayanan et al.'s count (full recomputation, "
                                         "a GPT of known shape): recipe megatron-lm-2021 with a megatron-* model")
            published = published * 1e12 / sc21_flops_per_token(model, row["seq_len"])
        row["tokens_per_s_per_gpu"] = published
        shards = row["tp"] * row["pp"] * row["cp"]
        if row["gpus"] % shards:
            raise ConfigError(where, f"{row['gpus']} GPUs are not a multiple of TP x PP x CP = {shards}")
        dp = row["gpus"] // shards
        if row["gbs"] % (row["mbs"] * dp):
            raise ConfigError(where, f"global batch {row['gbs']} is not a multiple of micro-batch x dp = "
                                     f"{row['mbs'] * dp}")
        rows.append(row)
    return rows


def scenario_mapping(row: dict[str, Any]) -> dict[str, Any]:
    """The scenario (as a mapping) that the row's published recipe runs (see the module doc)."""
    tp, pp, cp, vp = row["tp"], row["pp"], row["cp"], row["vp"]
    dp = row["gpus"] // (tp * pp * cp)
    cluster, profile = SYSTEMS[row["system"]]
    model = dict(DERIVED_MODELS.get(row["model"], {"preset": row["model"]}))
    model["seq_len"] = row["seq_len"]
    fsdp = row["fsdp"] > 0
    training: dict[str, Any] = {"micro_batch": row["mbs"], "micro_batches": row["gbs"] // (row["mbs"] * dp),
                                "precision": row["precision"], "kernels": row["kernels"]}
    recipe = row.get("recipe", RECIPES[0])
    modern = recipe == "megatron-core"
    if modern:
        training.update({"recompute": "none", "distributed_optimizer": not fsdp, "fsdp": fsdp,
                         "overlap_grad_reduce": True, "overlap_param_gather": not fsdp, "dp_bucket": 40_000_000})
        if not fsdp and row["source"] in GRAD_REDUCE_IN_FP32:
            training["grad_reduce_in_fp32"] = GRAD_REDUCE_IN_FP32[row["source"]]
    elif recipe == "megatron-deepspeed-2022":
        training.update({"recompute": "full", "zero_stage": 1, "overlap_grad_reduce": False,
                         "dp_bucket": DEEPSPEED_BUCKET_ENTRIES})
    else:
        torch_ddp = row["ddp"] == "torch"
        training.update({"recompute": "full", "zero_stage": 0, "overlap_grad_reduce": torch_ddp,
                         "dp_bucket": TORCH_DDP_BUCKET_ENTRIES if torch_ddp else ONE_BUCKET_ENTRIES})
    return {
        "name": row["id"], "description": f"{row['id']} ({row['source']})",
        "model": model,
        "training": training,
        "parallelism": {"pp": pp, "mp": tp, "dp": dp, "cp": cp, "sequence_parallel": modern and tp > 1,
                        "tp_comm_overlap": modern and tp > 1, "split": row["split"],
                        "schedule": "interleaved-1f1b" if vp > 1 else "1f1b", "virtual_stages": vp},
        "cluster": {"preset": cluster},
        "profile": {"name": profile},
        "simulation": {"mode": "realistic", "seed": 0},
    }


def predict_rows(rows: list[dict[str, Any]], cache_dir: str | None = None,
                 progress: Callable[[int], None] | None = None,
                 overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each row simulated (``overrides``: ``--set`` items for every row): predicted against published
    tokens per second per GPU."""
    from trainsim.scenarios.compose import predict, simulate_prediction
    from trainsim.scenarios.schema import apply_overrides, scenario_from_mapping

    out = []
    for row in rows:
        try:
            sc = scenario_from_mapping(apply_overrides(scenario_mapping(row), overrides), name=row["id"])
        except ConfigError as e:  # a cell the scenario refuses (split, kernels, model, ...): name the row
            raise ConfigError(f"row {row['id']}, {e.field}", e.message) from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # profile quirks are `trainsim profile`'s report
            pred = predict(sc, cache_dir=cache_dir)
            sim = simulate_prediction(pred)
        tokens = row["gbs"] * row["seq_len"]
        predicted = tokens / sim.iteration_s / row["gpus"]
        out.append({
            "id": row["id"], "source": row["source"], "model": row["model"], "gpus": row["gpus"],
            "precision": row["precision"], "layout": _layout(row), "iteration_s": sim.iteration_s,
            "published_iteration_s": tokens / row["tokens_per_s_per_gpu"] / row["gpus"],
            "predicted": predicted, "published": row["tokens_per_s_per_gpu"],
            "error_pct": 100.0 * (predicted / row["tokens_per_s_per_gpu"] - 1),
            "extrapolated_pct": 100.0 * pred.extrapolated.share, "profile": pred.profile_name,
            "memory_gib": pred.memory_gib_per_gpu, "memory_fits": pred.memory_fit.fits,
            "warnings": list(pred.warnings),
        })
        if progress is not None:
            progress(1)
    return out


def _layout(row: dict[str, Any]) -> str:
    parts = [f"TP{row['tp']}", f"PP{row['pp']}"]
    if row["vp"] > 1:
        parts.append(f"VP{row['vp']}")
    if row["cp"] > 1:
        parts.append(f"CP{row['cp']}")
    parts.append(f"{'FSDP' if row['fsdp'] else 'DP'}{row['gpus'] // (row['tp'] * row['pp'] * row['cp'])}")
    return " ".join(parts)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [r["error_pct"] for r in results]
    by_source: dict[str, list[float]] = {}
    for r in results:
        by_source.setdefault(r["source"], []).append(r["error_pct"])
    return {"runs": len(results), "memory_over_capacity": sum(not r["memory_fits"] for r in results),
            "mape_pct": statistics.fmean(abs(e) for e in errs),
            "mean_error_pct": statistics.fmean(errs), "max_abs_error_pct": max(abs(e) for e in errs),
            "by_source": {src: {"runs": len(e), "mape_pct": statistics.fmean(abs(x) for x in e),
                                "mean_error_pct": statistics.fmean(e)} for src, e in by_source.items()}}


def render(results: list[dict[str, Any]]) -> str:
    lines = ["| run | GPUs | precision | layout | predicted tok/s/GPU | published | error | extrapolated | "
             "memory per GPU |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        memory = f"{r['memory_gib']:.1f} GiB" + ("" if r["memory_fits"] else " (does not fit)")
        lines.append(f"| {r['id']} | {r['gpus']} | {r['precision']} | {r['layout']} | {r['predicted']:,.0f} | "
                     f"{r['published']:,.0f} | {r['error_pct']:+.1f}% | {r['extrapolated_pct']:.1f}% | {memory} |")
    s = summary(results)
    profiles = ", ".join(sorted({r["profile"] for r in results}))
    over = sum(not r["memory_fits"] for r in results)
    memory = (f"all {s['runs']} estimated to fit, as every published run did" if not over else
              f"{over} of {s['runs']} estimated not to fit, though every published run ran")
    lines += ["", f"Throughput: MAPE {s['mape_pct']:.1f}% (mean {s['mean_error_pct']:+.1f}%, max "
                  f"{s['max_abs_error_pct']:.1f}%) over {s['runs']} published runs ({profiles}). Memory: "
                  f"{memory}."]
    if len(s["by_source"]) > 1:
        lines.append("By source: " + "; ".join(f"{src} {v['mape_pct']:.1f}% (mean {v['mean_error_pct']:+.1f}%, "
                                               f"{v['runs']} run{'s' if v['runs'] > 1 else ''})"
                                               for src, v in s["by_source"].items()) + ".")
    return "\n".join(lines)
