"""``trainsim sweep``: which PP-MP-DP layout to pick for a scenario's GPU count and global batch.

A thin layer over :func:`trainsim.sweep` (see :mod:`trainsim.scenarios.sweep`).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from trainsim.operators import ConfigError
from trainsim.scenarios.commands.common import add_scenario_args, fmt_s, load, print_json, progress_bar


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="rank every PP-MP-DP layout of the scenario's GPU count (same global batch)")
    add_scenario_args(p)
    p.add_argument("--pp", default=None, metavar="LIST", help="pipeline degrees to try (default: all divisors)")
    p.add_argument("--mp", default=None, metavar="LIST", help="model-parallel degrees to try (default: all divisors)")
    p.add_argument("--cp", default=None, metavar="LIST", help="context-parallel degrees (default: the scenario's)")
    p.add_argument("--sp", choices=("on", "off", "both"), default=None,
                   help="sequence parallelism to try (default: the scenario's)")
    p.add_argument("--top", type=int, default=10, help="layouts to show, text and --json alike (default 10)")
    p.set_defaults(func=run)


def _int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ConfigError(option, f"expected comma-separated integers, got {text!r}") from None
    if not vals or vals[0] < 1:
        raise ConfigError(option, f"expected positive integers, got {text!r}")
    return vals


def run(args: argparse.Namespace) -> int:
    from trainsim import api
    from trainsim.scenarios.sweep import count_layouts

    if args.top < 1:
        raise ConfigError("--top", f"must be positive, got {args.top}")
    pps, mps, cps = _int_list(args.pp, "--pp"), _int_list(args.mp, "--mp"), _int_list(args.cp, "--cp")
    sps = {"on": [True], "off": [False], "both": [False, True]}.get(args.sp or "")
    base = load(args)
    total = count_layouts(base.gpus, pps, mps, cps or [base.parallelism.cp], sps)
    with progress_bar(args, "sweep", total, unit="layouts") as bar:
        res = api.sweep(base, pp=pps, mp=mps, cp=cps, sequence_parallel=sps, progress=bar.update,
                        reference_data=args.reference_data,
                        cache_dir=args.cache_dir, max_events=getattr(args, "max_events", None)).result
    if args.json:
        print_json(res.to_dict(top=args.top))
        return 0
    shown = res.rows[:args.top]
    print(f"{res.scenario}: {res.gpus} GPUs, global batch {res.global_batch} sequences, "
          f"b={base.training.micro_batch}, GPU memory {res.gpu_mem_gib:.0f} GiB; "
          f"{len(res.rows) + len(res.skipped)} layouts tried, {len(res.rows)} ranked, {len(res.skipped)} skipped"
          + (f"; the {len(shown)} best shown (--top)" if len(shown) < len(res.rows) else ""))
    width = max([9, *(len(r.layout) for r in shown)])
    print(f"{'PP-MP-DP':>{width}} {'m':>4} {'simulated':>11} {'Eq. 7':>11} {'tokens/s':>11} {'MFU':>6} "
          f"{'bubble':>7} {'GiB/GPU':>8}")
    for r in shown:
        flag = "" if r.fits_memory else "  does not fit (not simulated: Eq. 7's time)"
        print(f"{r.layout:>{width}} {r.micro_batches:>4} {fmt_s(r.simulated_s):>11} {fmt_s(r.eq7_s):>11} "
              f"{r.tokens_per_s:11,.0f} {100 * r.mfu:5.1f}% {100 * r.bubble_share:6.1f}% "
              f"{r.memory_gib_per_gpu:8.1f}{flag}")
    if res.skipped:
        print("skipped:")
        by_reason: dict[str, list[str]] = defaultdict(list)
        for s in res.skipped:
            by_reason[s.reason].append(s.layout)
        for reason, names in by_reason.items():
            print(f"  {', '.join(names)}: {reason}")
    return 0
