"""``trainsim jitter``: a seeded Monte Carlo of jittered iterations, and ``trainsim jitter fit``.

    trainsim jitter SCENARIO -n N [--seed S] [--jobs J] [--backend joblib|dask] [--scheduler ADDR]
                             [--json] [--plot FILE] [--shares K] [--measured LOG [--job ID]] [--set ...]
    trainsim jitter fit LOG [LOG ...] [--case SCENARIO ...] [--job ID ...] [--out preset.yaml]
                        [--plot FILE] [--format auto|csv|megatron|deepspeed|torchtitan]
                        [--drop-first 1] [--drop-last 1] [--outlier-factor 3] [--check-n 100] [--set ...]

``jitter fit`` fits one parameter set to all the logs' layouts jointly (one machine, one day).
A CSV with ``case`` and ``cluster`` columns names each job's scenario itself; otherwise give one
``--case`` per job, in order. The former ``jitter fit TIMES.csv SCENARIO`` still works.
(A scenario file literally named ``fit`` must be given as ``./fit.yaml``.)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np

from trainsim.operators import ConfigError
from trainsim.scenarios.commands.common import (
    PLOT_SUFFIXES,
    add_scenario_args,
    add_train_tokens_arg,
    check_writable,
    fit_progress,
    fmt_s,
    load,
    print_json,
    progress_bar,
    train_tokens,
    warn,
    with_run_time,
    write_atomic,
)
from trainsim.scenarios.time_to_train import time_to_train

SOURCE_LABELS = {"mp": "MP transfer noise", "pp": "PP transfer noise", "dp": "DP transfer noise",
                 "tail": "heavy-tailed message delays", "compute": "compute noise + stragglers",
                 "congestion": "link congestion (all traffic)"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jitter", help="Monte Carlo of jittered iterations (min/p50/mean/p95/max; --shares: by source); "
                                      "`jitter fit LOG... --case S...` fits one jitter set to measured logs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scenario_args(p)
    p.add_argument("fit_args", nargs="*", metavar="...", help=argparse.SUPPRESS)
    p.add_argument("-n", type=int, default=100, help="number of jittered iterations (default 100)")
    p.add_argument("--seed", type=int, default=None, help="default: simulation.seed of the scenario")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (joblib) (default 1)")
    p.add_argument("--backend", choices=("joblib", "dask"), default="joblib")
    p.add_argument("--scheduler", metavar="ADDR", default=None, help="dask scheduler address (with --backend dask)")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="write a histogram PNG (with --measured or for a fit: beside a QQ plot)")
    p.add_argument("--shares", type=int, default=None, metavar="K",
                   help="where the added time comes from: re-run the first K seeds with one jitter source on "
                        "at a time (K x sources more simulations; e.g. 200) (default 0: not measured)")
    p.add_argument("--measured", metavar="LOG", default=None,
                   help="measured iteration times to compare with (KS distance, QQ plot); any `jitter fit` format")
    add_train_tokens_arg(p)
    p.add_argument("--out", metavar="FILE", default=None, help="(jitter fit) write the fitted preset YAML here")
    p.add_argument("--case", action="append", default=None, metavar="SCENARIO",
                   help="(jitter fit) the scenario of each job, in order (repeatable)")
    p.add_argument("--job", action="append", default=None, metavar="ID",
                   help="only these jobs of the logs (repeatable)")
    p.add_argument("--format", default="auto", metavar="FMT",
                   help="log format: auto, csv, megatron (also GPT-NeoX), deepspeed, torchtitan (default auto)")
    p.add_argument("--batch-size", type=float, default=None, metavar="N",
                   help="DeepSpeed logs: the global train_batch_size (samples per step)")
    p.add_argument("--tokens-per-gpu-step", type=float, default=None, metavar="T",
                   help="torchtitan logs: tokens of one global step divided by the GPU count")
    p.add_argument("--drop-first", type=int, default=1, metavar="K", help="warm-up rows dropped per job (default 1)")
    p.add_argument("--drop-last", type=int, default=1, metavar="K", help="end-of-run rows dropped per job (default 1)")
    p.add_argument("--outlier-factor", type=float, default=3.0, metavar="F",
                   help="drop rows above F x the job's median (checkpoint/eval steps); 0 keeps all (default 3)")
    p.add_argument("--check-n", type=int, default=None, metavar="N",
                   help="(jitter fit) full-simulation iterations per layout for the goodness of fit (default 100)")
    p.add_argument("--no-step-latency", action="store_true",
                   help="(jitter fit) hold the episodes' latency per protocol step at 0 (bandwidth episodes only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.scenario == "fit":
        return run_fit(args)
    if args.fit_args:
        raise ConfigError("jitter", f"unexpected arguments {' '.join(args.fit_args)!r}")
    for opt, val in (("--out", args.out), ("--case", args.case), ("--check-n", args.check_n)):
        if val is not None:
            raise ConfigError(opt, "only `trainsim jitter fit` takes this option")
    if args.n < 1:
        raise ConfigError("-n", f"must be a positive integer, got {args.n}")
    plot = check_writable(args.plot, "--plot", PLOT_SUFFIXES) if args.plot else None
    measured = _measured(args) if args.measured else None
    tokens = train_tokens(args)

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
    comparison = None
    if measured is not None:
        from trainsim.scenarios.jitter_fit import LayoutLog, layout_fit

        times, label = measured
        lay = LayoutLog(scenario.name, label, times, None, scenario.cluster)  # type: ignore[arg-type]
        comparison = layout_fit(lay, res.samples_s, None, res.seed)
    if plot is not None:
        write_atomic(plot, lambda tmp: histogram(res, scenario.name, tmp, comparison))
    # a run's many iterations add up to their mean (the spread of the total shrinks as 1/sqrt(iterations))
    run_time = None if tokens is None else time_to_train(scenario, res.mean_s, tokens, "jittered mean")
    if args.json:
        d = mc.to_dict()
        if comparison is not None:
            c = comparison.to_json()
            c.pop("simulated_s")
            d["measured"] = {**c, "ks_raw": _ks_raw(times, res.samples_s)}
        print_json(with_run_time(d, run_time))
        return 0
    print(render(res, scenario.name))
    if comparison is not None:
        print(render_comparison(comparison, res.samples_s))
    if run_time is not None:
        print(run_time.text())
    return 0


def _ks_raw(measured: np.ndarray, simulated: np.ndarray) -> float:
    from trainsim.scenarios.jitter_fit import ks_distance

    return ks_distance(measured, simulated)


def _measured(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    """The --measured log's kept times (one job: --job picks it when the log holds several)."""
    from trainsim.scenarios.iteration_logs import read_iteration_log, select_rows

    series = read_iteration_log(args.measured, args.format, batch_size=args.batch_size,
                                tokens_per_gpu_step=args.tokens_per_gpu_step)
    if args.job:
        if len(args.job) != 1:
            raise ConfigError("--job", "--measured compares with one job; give one --job")
        series = [s for s in series if s.job == args.job[0]]
        if not series:
            raise ConfigError("--job", f"job {args.job[0]} is not in {args.measured}")
    if len(series) != 1:
        raise ConfigError("--job", f"{args.measured} holds {len(series)} jobs "
                                   f"({', '.join(s.job for s in series)}); pick one with --job")
    sel = select_rows(series[0], args.drop_first, args.drop_last, args.outlier_factor)
    return sel.kept_s, series[0].label


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
        f"p50                         {fmt_s(res.p50_s)}",
        f"mean                        {fmt_s(res.mean_s)}",
        f"p95                         {fmt_s(res.p95_s)}",
        f"max                         {fmt_s(res.max_s)}",
        f"mean over min               {res.avg_over_min_pct:+8.2f} %   (over {res.n} iterations; the minimum of "
        f"fewer is higher)",
    ]
    if res.per_kind_share:
        lines.append(f"where the added time comes from (mean - deterministic = {fmt_s(res.added_s['all']).strip()}; "
                     f"one source on at a time, first {res.share_samples} seeds):")
        for s, share in res.per_kind_share.items():
            lines.append(f"  {SOURCE_LABELS.get(s, s):30} {100 * share:6.1f} %   ({fmt_s(res.added_s[s]).strip()})")
        lines.append(f"  {'interactions (residual)':30} {100 * res.share_residual:6.1f} %")
    elif j is not None and res.share_samples == 0 and res.added_s:
        lines.append("jitter added no time on average; no shares to report")
    elif j is not None and res.share_samples == 0 and j.sources():
        lines.append(f"where the added time comes from: --shares K re-runs K seeds with one of the {len(j.sources())} "
                     "sources on at a time")
    return "\n".join(lines)


def render_comparison(c, simulated: np.ndarray) -> str:
    m = c.measured_s
    return "\n".join([
        f"measured ({c.label}, {c.n_measured} iterations kept):",
        f"  min {m.min():.3f} s  p50 {np.median(m):.3f} s  mean {m.mean():.3f} s  p95 {np.percentile(m, 95):.3f} s  "
        f"max {m.max():.3f} s",
        f"  mean over min: measured {c.measured_mom:+.1f} %, predicted {c.predicted_mom:+.1f} % at "
        f"{c.n_measured} iterations",
        f"  KS distance {_ks_raw(m, simulated):.3f} (absolute times); {c.ks:.3f} after scaling by the profile "
        f"offset {c.offset:.3f} (spread only); W1(log) {c.w1:.4f}",
    ])


# -- jitter fit --------------------------------------------------------------------------------------------


def _looks_like_scenario(arg: str) -> bool:
    if arg.endswith((".yaml", ".yml")):
        return True
    from trainsim.scenarios.schema import bundled_names

    return arg in bundled_names()


def run_fit(args: argparse.Namespace) -> int:
    logs = list(args.fit_args)
    cases = list(args.case or [])
    if not logs:
        raise ConfigError("jitter fit", "usage: trainsim jitter fit LOG [LOG ...] [--case SCENARIO ...] "
                                        "[--job ID ...] [--out preset.yaml]")
    if not cases and len(logs) == 2 and _looks_like_scenario(logs[1]):  # the former `jitter fit TIMES.csv SCENARIO`
        logs, cases = logs[:1], logs[1:]
    out = check_writable(args.out, "--out") if args.out else None
    plot = check_writable(args.plot, "--plot", PLOT_SUFFIXES) if args.plot else None
    if args.train_tokens is not None:
        raise ConfigError("--train-tokens", "`trainsim jitter fit` does not take this option")
    check_n = 100 if args.check_n is None else args.check_n
    if check_n < 2:
        raise ConfigError("--check-n", f"must be at least 2, got {check_n}")
    if args.jobs < 1:
        raise ConfigError("--jobs", f"must be a positive integer, got {args.jobs}")

    from trainsim.scenarios.compose import predict, scenario_simulator
    from trainsim.scenarios.iteration_logs import read_iteration_log, select_rows
    from trainsim.scenarios.jitter_fit import LayoutLog, fit_day, library_simulations, preset_text, report
    from trainsim.scenarios.schema import load_scenario

    series = []
    for path in logs:
        series += read_iteration_log(path, args.format, batch_size=args.batch_size,
                                     tokens_per_gpu_step=args.tokens_per_gpu_step)
    if args.job:
        by_job = {s.job: s for s in series}
        for j in args.job:
            if j not in by_job:
                raise ConfigError("--job", f"job {j!r} is not in {', '.join(logs)} (jobs there: "
                                           f"{', '.join(sorted(by_job))})")
        series = [by_job[j] for j in args.job]
    if cases:
        if len(cases) != len(series):
            raise ConfigError("--case", f"{len(cases)} --case for {len(series)} job(s) "
                                        f"({', '.join(s.job for s in series)}); give one per job, in order")
    else:
        unnamed = [s for s in series if s.case is None]
        if unnamed:
            raise ConfigError("--case", f"{unnamed[0].label} does not say which scenario it ran; "
                                        f"give one --case per job")
        cases = [str(s.case) for s in series]
    selections = [select_rows(s, args.drop_first, args.drop_last, args.outlier_factor) for s in series]
    scenarios = [load_scenario(c, args.overrides) for c in cases]
    clusters = {sc.cluster.name for sc in scenarios}
    if len(clusters) > 1:
        raise ConfigError("--case", f"one fit describes one machine; the cases run on {', '.join(sorted(clusters))}")
    layouts = []
    with fit_progress(args) as fitbar:
        for sc, sel in zip(scenarios, selections, strict=True):
            pred = predict(sc, reference_data=args.reference_data, cache_dir=args.cache_dir, fit_progress=fitbar)
            warn(pred.warnings, quiet=args.quiet)
            layouts.append(LayoutLog(sc.name, sel.series.label, sel.kept_s, pred.costs, sc.cluster,
                                     scenario_simulator(sc), sel.series.averaged_over))
    if not args.quiet:
        for sel in selections:
            rows = "; ".join(f"iteration {it} ({s:.3f} s): {why}" for it, s, why in sel.dropped) or "none"
            print(f"trainsim: {sel.series.label}: kept {sel.kept_s.size} iterations; dropped {rows}", file=sys.stderr)
    seed = scenarios[0].simulation.seed if args.seed is None else args.seed
    with progress_bar(args, "jitter fit", library_simulations(len(layouts), check_n), unit="iterations") as bar:
        fit = fit_day(layouts, scenarios[0].simulation.jitter, seed=seed, jobs=args.jobs, check_n=check_n,
                      progress=bar.update, step_latency=not args.no_step_latency)
    command = "trainsim jitter fit " + " ".join(shlex.quote(a) for a in _argv_tail())
    text = preset_text(fit, command, ", ".join(sel.series.label for sel in selections))
    if out is not None:
        write_atomic(out, lambda tmp: Path(tmp).write_text(text))
        print(f"wrote {out}", file=sys.stderr)
    if plot is not None:
        write_atomic(plot, lambda tmp: fit_figure(fit, tmp))
    if args.json:
        print_json(fit.to_json())
    else:
        print("\n".join(report(fit)))
        if out is None:
            sys.stdout.write(text.split("\n# ")[-1].split("\n", 1)[-1])
    return 0


def _argv_tail() -> list[str]:
    argv = sys.argv[1:]
    return argv[argv.index("fit") + 1:] if "fit" in argv else argv


# -- figures ----------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _qq(ax, measured: np.ndarray, simulated: np.ndarray, offset: float, title: str) -> None:
    """Measured quantiles against the simulation's (scaled by the profile offset): on the diagonal if alike."""
    q = (np.arange(measured.size) + 0.5) / measured.size
    xs = np.quantile(simulated * offset, q)
    ys = np.sort(measured)
    ax.plot(xs, ys, "o", color="#dd8452", markersize=4)
    lo, hi = min(xs.min(), ys.min()), max(xs.max(), ys.max())
    ax.plot([lo, hi], [lo, hi], "k:", linewidth=1)
    ax.set_xlabel(f"simulated x {offset:.3f} (s)")
    ax.set_ylabel("measured (s)")
    ax.set_title(title, fontsize=9)


def _hist(ax, simulated: np.ndarray, measured: np.ndarray | None, offset: float, title: str) -> None:
    sims = simulated * offset
    data = sims if measured is None else np.concatenate([sims, measured])
    bins = np.linspace(data.min(), data.max(), min(50, max(10, simulated.size // 10)) + 1)
    ax.hist(sims, bins=bins, density=True, color="#4c72b0", alpha=0.6,
            label="simulated" + (f" x {offset:.3f}" if offset != 1 else ""))
    if measured is not None:
        ax.hist(measured, bins=bins, density=True, color="#dd8452", alpha=0.6, label="measured")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("density")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def histogram(res, name: str, path: str, comparison=None) -> None:
    """The Monte Carlo's histogram; with measured times, beside a QQ plot."""
    plt = _pyplot()
    if comparison is None:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist(res.samples_s, bins=min(50, max(10, res.n // 10)), color="#4c72b0", alpha=0.85)
        for x, label, style in ((res.deterministic_s, "deterministic", ":"), (res.min_s, "min", "--"),
                                (res.p50_s, "p50", (0, (1, 3))), (res.mean_s, "mean", "-"), (res.p95_s, "p95", "-.")):
            ax.axvline(x, color="k", linestyle=style, linewidth=1, label=f"{label} {x:.3f} s")
        ax.set_xlabel("iteration time (s)")
        ax.set_ylabel("iterations")
        ax.set_title(f"{name}: {res.n} jittered iterations, mean/min {res.avg_over_min_pct:+.1f}%")
        ax.legend(fontsize=8)
    else:
        c = comparison
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        _hist(a1, res.samples_s, c.measured_s, c.offset,
              f"{name}: mean/min measured {c.measured_mom:+.1f}%, predicted {c.predicted_mom:+.1f}% (n={c.n_measured})")
        _qq(a2, c.measured_s, res.samples_s, c.offset, f"QQ; KS {c.ks:.3f} (after scaling)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)  # the format follows the extension (checked before the run)
    plt.close(fig)


def fit_figure(fit, path: str) -> None:
    """One row per layout of a fit: histogram (measured vs the fitted simulation) and QQ plot."""
    plt = _pyplot()
    rows = len(fit.layouts)
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.6 * rows), squeeze=False)
    for (a1, a2), lf in zip(axes, fit.layouts, strict=True):
        _hist(a1, lf.simulated_s, lf.measured_s, lf.offset,
              f"{lf.name} ({lf.label}): mean/min meas. {lf.measured_mom:+.1f}%, pred. {lf.predicted_mom:+.1f}%")
        _qq(a2, lf.measured_s, lf.simulated_s, lf.offset, f"QQ; KS {lf.ks:.3f}, W1(log) {lf.w1:.4f}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
