"""``trainsim calibrate``: measure operator samples on this machine's GPU (or CPU).

Writes a sample directory (compute.csv + meta.json, the schema of
:mod:`calibration.samples`) that ``profile.name: <DIR>`` or a shipped profile can
use. Each sample is appended as soon as it is measured, so an interrupted run
resumes where it stopped when started again with the same ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from trainsim.operators import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="micro-benchmark the operators on this GPU into a sample directory")
    p.add_argument("--out", required=True, metavar="DIR", help="sample directory to create or resume")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--budget", type=int, default=None, metavar="N", help="at most N (operator, direction) samples")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="stop starting new samples after S seconds (resume later)")
    p.add_argument("--ops", default=None, metavar="KINDS",
                   help="comma-separated operator kinds, or hf / megatron / all (default all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Sobol plan and of the random inputs")
    p.add_argument("--configs", default=None, metavar="CSV",
                   help="also measure the exact operators of these configurations first "
                        "(columns name,hidden,heads,layers,seq_len,micro_batch,micro_batches,recompute, "
                        "optional tp: one tensor-parallel rank's operators; e.g. validation/configs.csv; or "
                        "Megatron rows: preset,micro_batch,tp[,sp,cp,precision,seq_len], e.g. "
                        "validation/configs_published.csv)")
    p.add_argument("--points", type=int, default=None, metavar="N", help="Sobol points when no --budget (256)")
    p.add_argument("--hf-tp", action="store_true",
                   help="sample the hf kinds at the Sobol point's tensor-parallel degree (one rank's shard "
                        "under PyTorch's DTensor plan) instead of whole on one GPU")
    p.add_argument("--gpu-time", action="store_true",
                   help="time the kernels alone: a sleep kernel holds the GPU while the CPU queues the timed runs "
                        "(as in training, where the CPU runs ahead); default: each run's events also time its launches")
    p.add_argument("--box", choices=("paper", "broad"), default="paper",
                   help="paper: the paper's box (d to 8192, l to 5120, b to 16); broad: d to 16384, l to 32768, "
                        "b to 64, GQA, SwiGLU widths, vocabulary to 256k (Megatron, SwiGLU and FP8 kinds)")
    p.add_argument("--max-gib", type=float, default=24.0, help="skip shapes estimated to need more memory")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress report (errors still print)")
    p.set_defaults(func=run)


def read_configs(path: str, vocab: int = 50432) -> list:
    """Validation-style configurations as (ModelSpec, TrainingSpec(framework=hf), Parallelism(mp=tp)).

    ``tp`` (optional column, default 1) asks for one tensor-parallel rank's operators."""
    from trainsim.operators import ModelSpec, Parallelism, TrainingSpec

    try:
        fh = open(path, newline="")
    except OSError as e:
        raise ConfigError("--configs", f"cannot read {path}: {e.strerror}") from None
    out = []
    with fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            if row.get("preset"):
                out.append(_preset_row(path, i, row))
                continue
            try:
                model = ModelSpec(row["name"], hidden=int(row["hidden"]), heads=int(row["heads"]),
                                  layers=int(row["layers"]), seq_len=int(row["seq_len"]), vocab=vocab)
                training = TrainingSpec(micro_batch=int(row["micro_batch"]), micro_batches=int(row["micro_batches"]),
                                        precision="bf16", recompute=row.get("recompute") or "none",
                                        framework="hf")
                par = Parallelism(mp=int(row.get("tp") or 1))
            except (KeyError, ValueError) as e:
                raise ConfigError(f"{path}:{i}", f"bad configuration row: {e}") from None
            out.append((model, training, par))
    return out


def _preset_row(path: str, line: int, row: dict) -> tuple:
    """A Megatron configuration from a model preset: one layer per pipeline stage (every operator
    once, the optimizer kinds at one layer), one tensor-parallel rank of degree ``tp``, with
    sequence parallelism (``sp``: 1/true), context parallelism (``cp``) and ``precision``."""
    import dataclasses

    from trainsim.operators import MODEL_PRESETS, Parallelism, TrainingSpec

    try:
        model = MODEL_PRESETS[row["preset"]]
        if row.get("seq_len"):
            model = dataclasses.replace(model, seq_len=int(row["seq_len"]))
        training = TrainingSpec(micro_batch=int(row["micro_batch"]), micro_batches=1, recompute="none",
                                precision=row.get("precision") or "bf16", zero_stage=0)
        par = Parallelism(pp=model.layers, mp=int(row.get("tp") or 1), cp=int(row.get("cp") or 1),
                          sequence_parallel=(row.get("sp") or "").strip().lower() in ("1", "true", "yes"),
                          split="megatron")
    except KeyError as e:
        raise ConfigError(f"{path}:{line}", f"bad configuration row: unknown preset or missing column {e}") from None
    except (ValueError, ConfigError) as e:
        raise ConfigError(f"{path}:{line}", f"bad configuration row: {e}") from None
    return model, training, par


def run(args: argparse.Namespace) -> int:
    from trainsim.calibration.sampling import config_ops, parse_kinds, sampling_plan

    for name in ("budget", "points", "warmup", "iters"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise ConfigError(f"--{name}", f"must be positive, got {value}")
    if args.time_budget is not None and not args.time_budget > 0:
        raise ConfigError("--time-budget", f"must be a positive number of seconds, got {args.time_budget}")
    kinds = parse_kinds(args.ops)
    include = config_ops(read_configs(args.configs)) if args.configs else []
    plan = sampling_plan(kinds, budget=args.budget, seed=args.seed, include=include,
                         max_bytes=args.max_gib * 2**30, points=args.points, hf_tp=args.hf_tp, box=args.box)

    from trainsim.calibration.harness import TorchUnavailable, make_env, pending, run_plan
    from trainsim.scenarios.progress import Progress

    try:
        env = make_env(args.device, args.precision, args.seed, cpu_ahead=args.gpu_time)
    except TorchUnavailable as e:
        print(f"trainsim: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a directory")
    with Progress("calibrate", len(pending(plan, out)), unit="samples", quiet=args.quiet) as bar:
        stats = run_plan(plan, out, env, args.precision, time_budget_s=args.time_budget, warmup=args.warmup,
                         iters=args.iters, extra_meta={"seed": args.seed, "plan_rows": len(plan)},
                         progress=bar.update)
    print(f"{out}: {stats['measured']} measured, {stats['skipped']} already there, "
          f"{stats['failed']} out of memory, {stats['remaining']} left for a later run")
    return 0
