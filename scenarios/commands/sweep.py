"""``trainsim sweep``: which layout to pick for a scenario's GPU count and global batch.

A thin layer over :func:`trainsim.scenarios.sweep.sweep_layouts`: PP, MP, DP, CP, sequence
parallelism, micro-batch size and pipeline schedule, pruned by memory fit and by a closed-form
lower bound (branch and bound on ``--top``), simulated in parallel with ``--jobs`` or on Dask.
"""

from __future__ import annotations

import argparse
import functools
from collections import defaultdict

from trainsim.operators import ConfigError
from trainsim.scenarios.commands.common import (
    add_scenario_args,
    add_train_tokens_arg,
    fmt_s,
    load,
    print_json,
    progress_bar,
    train_tokens,
    with_run_time,
)
from trainsim.scenarios.time_to_train import time_to_train


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="rank every PP-MP-DP layout of the scenario's GPU count (same global batch)")
    add_scenario_args(p)
    p.add_argument("--pp", default=None, metavar="LIST", help="pipeline degrees to try (default: all divisors)")
    p.add_argument("--mp", default=None, metavar="LIST", help="model-parallel degrees to try (default: all divisors)")
    p.add_argument("--cp", default=None, metavar="LIST", help="context-parallel degrees (default: the scenario's)")
    p.add_argument("--sp", choices=("on", "off", "both"), default=None,
                   help="sequence parallelism to try (default: the scenario's)")
    p.add_argument("--micro-batch", default=None, metavar="LIST",
                   help="micro-batch sizes to try; the global batch is kept, micro_batches follows "
                        "(default: the scenario's)")
    p.add_argument("--schedule", default=None, metavar="LIST",
                   help="pipeline schedules to try: 1f1b, gpipe, interleaved-1f1b[:V] (V chunks per stage; "
                        "default the scenario's virtual_stages, else 2) (default: the scenario's schedule)")
    p.add_argument("--top", type=int, default=10,
                   help="layouts to show, text and --json alike, and K of the branch and bound: layouts whose "
                        "lower bound exceeds the K-th best simulated time are not simulated (default 10)")
    p.add_argument("--all", action="store_true", help="simulate every layout that fits (no pruning by the bound)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1); same results for any value")
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run the layouts on a dask.distributed scheduler (tcp://host:8786), or 'local' for a "
                        "local cluster of --jobs workers (needs: pip install 'trainsim[dask]')")
    add_train_tokens_arg(p)
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
    from trainsim.scenarios.guard import DEFAULT_MAX_EVENTS, check_resources
    from trainsim.scenarios.sweep import PROGRESS_UNITS_PER_LAYOUT, candidates, parse_schedules, sweep_layouts

    if args.top < 1:
        raise ConfigError("--top", f"must be positive, got {args.top}")
    if args.jobs < 1:
        raise ConfigError("--jobs", f"must be a positive integer, got {args.jobs}")
    if args.dask is not None and not args.dask.strip():
        raise ConfigError("--dask", "expected a scheduler address (tcp://host:8786) or 'local'")
    tokens = train_tokens(args)
    pps, mps, cps = _int_list(args.pp, "--pp"), _int_list(args.mp, "--mp"), _int_list(args.cp, "--cp")
    bs = _int_list(args.micro_batch, "--micro-batch")
    sps = {"on": [True], "off": [False], "both": [False, True]}.get(args.sp or "")
    base = load(args)
    par = base.parallelism
    schedules = None
    if args.schedule is not None:
        schedules = parse_schedules(args.schedule.split(","), par.virtual_stages if par.virtual_stages > 1 else 2)
    if args.dask is not None:
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise ConfigError("--dask", "needs the optional dependency dask.distributed: "
                                        "pip install 'trainsim[dask]'") from None
    cands = candidates(base, pps=pps, mps=mps, cps=cps, sps=sps, micro_batches=bs, schedules=schedules)
    max_events = getattr(args, "max_events", None)
    # the resource guard, per layout (a partial: picklable for dask and spawned workers)
    check = functools.partial(check_resources, max_events=DEFAULT_MAX_EVENTS if max_events is None else max_events)
    top = None if args.all else args.top
    with progress_bar(args, "sweep", PROGRESS_UNITS_PER_LAYOUT * len(cands), unit="steps") as bar:
        res = sweep_layouts(base, pps=pps, mps=mps, cps=cps, sps=sps, micro_batches=bs, schedules=schedules,
                            top=top, jobs=args.jobs, dask=args.dask, progress=bar.update,
                            reference_data=args.reference_data, cache_dir=args.cache_dir, check=check)
    # every layout keeps the global batch, so they all take the same iterations: the best is the fastest to train
    best = res.best  # the fastest simulated layout that fits (None: none does, and no run is priced)
    run_time = (None if tokens is None or best is None else
                time_to_train(base, best.simulated_s, tokens, f"best layout's ({best.layout}) simulated"))
    if args.json:
        print_json(with_run_time(res.to_dict(top=args.top), run_time))
        return 0
    shown = res.rows[:args.top]
    print(f"{res.scenario}: {res.gpus} GPUs, global batch {res.global_batch} sequences, "
          f"b={base.training.micro_batch}, GPU memory {res.gpu_mem_gib:.0f} GiB; "
          f"{len(res.rows) + len(res.skipped)} layouts tried, {len(res.rows)} ranked, {len(res.skipped)} skipped"
          + (f"; the {len(shown)} best shown (--top)" if len(shown) < len(res.rows) else ""))
    bound = ("not used (--all)" if args.all else
             f"{res.pruned_bound} by the lower bound (sim.bound: each stage's own steps, the pipeline's fill "
             f"and drain, no waiting or contention), which exceeds the {args.top}{_th(args.top)} best simulated "
             f"time: outside the top {args.top}")
    workers = f"; {args.jobs} workers" if args.jobs > 1 else ""
    workers += f" on dask ({args.dask})" if args.dask else ""
    print(f"simulated in full: {res.simulated}; pruned: {res.pruned_memory} by memory (do not fit), {bound}{workers}")
    n_sim = sum(r.simulated for r in shown)
    if shown:
        print(f"the {len(shown)} shown: {n_sim} simulated in full (every step of the discrete-event simulation)"
              + ("" if n_sim == len(shown) else f", {len(shown) - n_sim} not simulated (see the last column)"))
    width = max([9, *(len(r.layout) for r in shown)])
    print(f"{'PP-MP-DP':>{width}} {'b':>3} {'m':>4} {'schedule':>18} {'simulated':>11} {'Eq. 7':>11} "
          f"{'bound':>11} {'tokens/s':>11} {'MFU':>6} {'bubble':>7} {'GiB/GPU':>8}")
    for r in shown:
        flag = ("" if r.simulated else "  does not fit (not simulated: Eq. 7's time)" if r.pruned == "memory"
                else "  pruned by the bound (not simulated: Eq. 7's time)")
        print(f"{r.layout:>{width}} {r.micro_batch:>3} {r.micro_batches:>4} {r.schedule:>18} "
              f"{fmt_s(r.simulated_s):>11} {fmt_s(r.eq7_s):>11} {fmt_s(r.bound_s):>11} "
              f"{r.tokens_per_s:11,.0f} {100 * r.mfu:5.1f}% {100 * r.bubble_share:6.1f}% "
              f"{r.memory_gib_per_gpu:8.1f}{flag}")
    if res.skipped:
        print("skipped:")
        by_reason: dict[str, list[str]] = defaultdict(list)
        for s in res.skipped:
            by_reason[s.reason].append(s.layout)
        for reason, names in by_reason.items():
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            print(f"  {', '.join(names[:8])}{more}: {reason}")
    if run_time is not None:
        print(run_time.text())
    return 0


def _th(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
