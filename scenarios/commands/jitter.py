"""``trainsim jitter``: a seeded Monte Carlo of jittered iterations, and ``trainsim jitter fit``.

    trainsim jitter SCENARIO -n N [--seed S] [--jobs J] [--backend joblib|dask] [--scheduler ADDR]
                             [--json] [--plot FILE] [--shares K] [--set ...]
    trainsim jitter fit TIMES.csv SCENARIO [--out snippet.yaml] [--set ...]

(A scenario file literally named ``fit`` must be given as ``./fit.yaml``.)
"""

from __future__ import annotations

import argparse
import sys

from trainsim.operators import ConfigError
from trainsim.scenarios.commands.common import (
    PLOT_SUFFIXES,
    add_scenario_args,
    check_writable,
    fit_progress,
    fmt_s,
    load,
    print_json,
    progress_bar,
    warn,
    write_atomic,
)

SOURCE_LABELS = {"mp": "MP transfer noise", "pp": "PP transfer noise", "dp": "DP transfer noise",
                 "compute": "compute noise + stragglers", "congestion": "link congestion (all traffic)"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jitter", help="Monte Carlo of jittered iterations (min/mean/p95, per-kind shares); "
                                      "`jitter fit TIMES.csv SCENARIO` fits jitter to measured times",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scenario_args(p)
    p.add_argument("fit_args", nargs="*", metavar="...", help=argparse.SUPPRESS)
    p.add_argument("-n", type=int, default=100, help="number of jittered iterations (default 100)")
    p.add_argument("--seed", type=int, default=None, help="default: simulation.seed of the scenario")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (joblib) (default 1)")
    p.add_argument("--backend", choices=("joblib", "dask"), default="joblib")
    p.add_argument("--scheduler", metavar="ADDR", default=None, help="dask scheduler address (with --backend dask)")
    p.add_argument("--plot", metavar="FILE", default=None, help="write a histogram PNG")
    p.add_argument("--shares", type=int, default=None, metavar="K",
                   help="seeds re-run per jitter source for the per-kind shares (default min(n, 200); 0: skip)")
    p.add_argument("--out", metavar="FILE", default=None, help="(jitter fit) write the YAML snippet here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.scenario == "fit":
        return run_fit(args)
    if args.fit_args:
        raise ConfigError("jitter", f"unexpected arguments {' '.join(args.fit_args)!r}")
    if args.out is not None:
        raise ConfigError("--out", "only `trainsim jitter fit` writes a snippet; use --json or --plot here")
    if args.n < 1:
        raise ConfigError("-n", f"must be a positive integer, got {args.n}")
    plot = check_writable(args.plot, "--plot", PLOT_SUFFIXES) if args.plot else None

    from trainsim import api
    from trainsim.scenarios.montecarlo import monte_carlo_total
    from trainsim.sim.jitter_config import parse_jitter

    scenario = load(args)
    total = monte_carlo_total(parse_jitter(scenario.simulation.jitter), args.n, args.shares)
    with fit_progress(args) as fitbar, progress_bar(args, "jitter", total, unit="iterations") as bar:
        mc = api.monte_carlo(scenario, args.n, seed=args.seed, jobs=args.jobs, backend=args.backend,
                             scheduler=args.scheduler, shares=args.shares, progress=bar.update,
                             reference_data=args.reference_data, cache_dir=args.cache_dir,
                             max_events=getattr(args, "max_events", None), fit_progress=fitbar)
    warn(mc.warnings, quiet=args.quiet)
    res = mc.result
    if plot is not None:
        write_atomic(plot, lambda tmp: _histogram(res, scenario.name, tmp))
    if args.json:
        print_json(mc.to_dict())
        return 0
    print(render(res, scenario.name))
    return 0


def render(res, name: str) -> str:
    j = res.jitter
    lines = [f"{name}: {res.n} iterations, seed {res.seed}, "
             + (f"jitter preset {j.preset}" if j and j.preset else ("custom jitter" if j else "no jitter"))]
    if j is None:
        lines.append("no jitter configured (simulation.jitter is empty): every sample equals the deterministic "
                     "simulation; try --set simulation.jitter.preset=vista")
    lines += [
        f"deterministic (jitter off)  {fmt_s(res.deterministic_s)}",
        f"min                         {fmt_s(res.min_s)}",
        f"mean                        {fmt_s(res.mean_s)}",
        f"p50                         {fmt_s(res.p50_s)}",
        f"p95                         {fmt_s(res.p95_s)}",
        f"max                         {fmt_s(res.max_s)}",
        f"mean over min               {res.avg_over_min_pct:+8.2f} %",
    ]
    if res.per_kind_share:
        lines.append(f"where the added time comes from (mean - deterministic = {fmt_s(res.added_s['all']).strip()}; "
                     f"one source on at a time, first {res.share_samples} seeds):")
        for s, share in res.per_kind_share.items():
            lines.append(f"  {SOURCE_LABELS.get(s, s):30} {100 * share:6.1f} %   ({fmt_s(res.added_s[s]).strip()})")
        lines.append(f"  {'interactions (residual)':30} {100 * res.share_residual:6.1f} %")
    elif j is not None and res.share_samples == 0 and res.added_s:
        lines.append("jitter added no time on average; no shares to report")
    return "\n".join(lines)


def _histogram(res, name: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(res.samples_s, bins=min(50, max(10, res.n // 10)), color="#4c72b0", alpha=0.85)
    for x, label, style in ((res.deterministic_s, "deterministic", ":"), (res.min_s, "min", "--"),
                            (res.mean_s, "mean", "-"), (res.p95_s, "p95", "-.")):
        ax.axvline(x, color="k", linestyle=style, linewidth=1, label=f"{label} {x:.3f} s")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("iterations")
    ax.set_title(f"{name}: {res.n} jittered iterations, mean/min {res.avg_over_min_pct:+.1f}%")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)  # the format follows the extension (checked before the run)
    plt.close(fig)


def run_fit(args: argparse.Namespace) -> int:
    if len(args.fit_args) != 2:
        raise ConfigError("jitter fit", "usage: trainsim jitter fit TIMES.csv SCENARIO [--out snippet.yaml]")
    times_path, scenario_name = args.fit_args
    out = check_writable(args.out, "--out") if args.out else None

    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.jitter_fit import fit_jitter, read_times, snippet
    from trainsim.scenarios.schema import load_scenario

    times = read_times(times_path)
    scenario = load_scenario(scenario_name, args.overrides)
    with fit_progress(args) as fitbar:
        pred = predict(scenario, reference_data=args.reference_data, cache_dir=args.cache_dir, fit_progress=fitbar)
    warn(pred.warnings, quiet=args.quiet)
    seed = scenario.simulation.seed if args.seed is None else args.seed
    from trainsim.scenarios.compose import scenario_simulator

    with progress_bar(args, "jitter fit", None, unit="iterations") as bar:
        fit = fit_jitter(times, pred.costs, scenario.cluster, scenario.simulation.jitter, seed=seed, jobs=args.jobs,
                         simulate=scenario_simulator(scenario), progress=bar.update)
    text = snippet(fit, times_path)
    if out is not None:
        write_atomic(out, lambda tmp: open(tmp, "w").write(text))
        print(f"wrote {out}", file=sys.stderr)
    if args.json:
        print_json(fit.to_json())
    elif out is None:
        sys.stdout.write(text)
    return 0
