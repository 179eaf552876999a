"""``trainsim sweep``: which PP-MP-DP layout to pick for a scenario's GPU count and global batch.

Every layout with ``pp * mp * dp`` equal to the scenario's GPU count is tried at the same
global batch (``micro_batch * micro_batches * dp`` kept; a layout whose dp does not divide it
is skipped), predicted with Eq. 7, simulated, and checked against the GPU's memory. Layouts
that the model or the cluster cannot take (heads not divisible by mp, more stages than
layers, groups straddling nodes unevenly) are listed with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses

from trainsim.operators import ConfigError
from trainsim.scenarios.commands.common import add_scenario_args, fmt_s, load, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="rank every PP-MP-DP layout of the scenario's GPU count (same global batch)")
    add_scenario_args(p)
    p.add_argument("--pp", default=None, metavar="LIST", help="pipeline degrees to try (default: all divisors)")
    p.add_argument("--mp", default=None, metavar="LIST", help="model-parallel degrees to try (default: all divisors)")
    p.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    p.set_defaults(func=run)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _int_list(text: str | None, option: str, default: list[int]) -> list[int]:
    if text is None:
        return default
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(option, f"expected comma-separated integers, got {text!r}") from None
    if not vals or vals[0] < 1:
        raise ConfigError(option, f"expected positive integers, got {text!r}")
    return vals


def layouts(gpus: int, pps: list[int], mps: list[int]) -> list[tuple[int, int, int]]:
    return [(pp, mp, gpus // (pp * mp)) for pp in pps for mp in mps if gpus % (pp * mp) == 0]


def run(args: argparse.Namespace) -> int:
    from trainsim.operators.memory import memory_per_gpu
    from trainsim.operators.spec import check_model_fits
    from trainsim.scenarios.commands.run import simulate_scenario
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import Scenario

    if args.top < 1:
        raise ConfigError("--top", f"must be positive, got {args.top}")
    base: Scenario = load(args)
    gpus = base.gpus
    tr = base.training
    global_batch = tr.micro_batch * tr.micro_batches * base.parallelism.dp
    rows, skipped = [], []
    for pp, mp, dp in layouts(gpus, _int_list(args.pp, "--pp", _divisors(gpus)),
                              _int_list(args.mp, "--mp", _divisors(gpus))):
        name = f"{pp}-{mp}-{dp}"
        if global_batch % (tr.micro_batch * dp):
            skipped.append((name, f"dp {dp} does not divide the global batch {global_batch} at b={tr.micro_batch}"))
            continue
        par = dataclasses.replace(base.parallelism, pp=pp, mp=mp, dp=dp)
        training = dataclasses.replace(tr, micro_batches=global_batch // (tr.micro_batch * dp))
        sc = dataclasses.replace(base, parallelism=par, training=training, name=f"{base.name} {name}")
        try:
            check_model_fits(sc.model, par)
            pred = predict(sc, reference_data=args.reference_data, cache_dir=args.cache_dir)
            sim = simulate_scenario(pred)
        except ConfigError as e:
            skipped.append((name, str(e)))
            continue
        mem = memory_per_gpu(sc.model, sc.training, sc.parallelism, pred.plans).total_gib
        rows.append({
            "layout": name, "pp": pp, "mp": mp, "dp": dp, "micro_batches": training.micro_batches,
            "simulated_s": sim.iteration_s, "eq7_s": pred.eq7.iteration_s, "tokens_per_s": sim.tokens_per_s,
            "mfu": sim.mfu, "bubble_share": sim.bubble_share, "memory_gib_per_gpu": mem,
            "fits_memory": mem <= sc.cluster.gpu.mem_gib,
        })
    rows.sort(key=lambda r: (not r["fits_memory"], r["simulated_s"]))
    if args.json:
        print_json({"scenario": base.name, "gpus": gpus, "global_batch": global_batch, "layouts": rows,
                    "skipped": [{"layout": n, "reason": r} for n, r in skipped]})
        return 0
    print(f"{base.name}: {gpus} GPUs, global batch {global_batch} sequences, b={tr.micro_batch}, "
          f"GPU memory {base.cluster.gpu.mem_gib:.0f} GiB; {len(rows)} layouts, {len(skipped)} skipped")
    print(f"{'PP-MP-DP':>9} {'m':>4} {'simulated':>11} {'Eq. 7':>11} {'tokens/s':>11} {'MFU':>6} "
          f"{'bubble':>7} {'GiB/GPU':>8}")
    for r in rows[:args.top]:
        flag = "" if r["fits_memory"] else "  does not fit"
        print(f"{r['layout']:>9} {r['micro_batches']:>4} {fmt_s(r['simulated_s']):>11} {fmt_s(r['eq7_s']):>11} "
              f"{r['tokens_per_s']:11,.0f} {100 * r['mfu']:5.1f}% {100 * r['bubble_share']:6.1f}% "
              f"{r['memory_gib_per_gpu']:8.1f}{flag}")
    return 0
