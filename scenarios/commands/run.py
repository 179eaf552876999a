"""``trainsim run``: simulate one iteration and report where the time goes."""

from __future__ import annotations

import argparse

from trainsim.scenarios.commands.common import (
    PLOT_SUFFIXES,
    TRACE_SUFFIXES,
    add_scenario_args,
    add_train_tokens_arg,
    check_writable,
    fit_progress,
    fmt_s,
    load,
    print_json,
    progress_bar,
    remove_outputs,
    train_tokens,
    warn,
    with_run_time,
    write_atomic,
)
from trainsim.scenarios.compose import layout_text, memory_line
from trainsim.scenarios.time_to_train import time_to_train


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate one iteration (SimPy): timeline, exposed communication, MFU")
    add_scenario_args(p)
    p.add_argument("--ideal", action="store_true", help="follow Eq. 7's assumptions (equals Eq. 7)")
    p.add_argument("--trace", metavar="FILE", help="write a Perfetto / Chrome trace JSON (ui.perfetto.dev)")
    p.add_argument("--trace-replicas", choices=("critical", "all"), default="critical",
                   help="trace the critical replica of every stage and the links it used (default), or all")
    p.add_argument("--plot", metavar="FILE", help="write the pipeline timeline PNG (the paper's Figure 2)")
    p.add_argument("--breakdown", metavar="FILE", help="write the component breakdown PNG (the paper's Figure 3)")
    add_train_tokens_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim import api

    outputs = {opt: check_writable(path, f"--{opt}", TRACE_SUFFIXES if opt == "trace" else PLOT_SUFFIXES)
               for opt, path in (("trace", args.trace), ("plot", args.plot), ("breakdown", args.breakdown)) if path}
    tokens = train_tokens(args)
    with fit_progress(args) as fitbar, progress_bar(args, "simulating", None, unit="simulated ms") as bar:
        sim = api.simulate(load(args), trace=outputs.get("trace"), trace_replicas=args.trace_replicas,
                           ideal=args.ideal, record=bool(args.plot), reference_data=args.reference_data,
                           cache_dir=args.cache_dir, max_events=getattr(args, "max_events", None),
                           fit_progress=fitbar, progress=_simulated_ms(bar))
    pred, result = sim.prediction, sim.result
    warn(pred.warnings, quiet=args.quiet, extrapolated=pred.extrapolated)
    written = [outputs["trace"]] if "trace" in outputs else []
    try:  # a later output failing takes the earlier ones of this command with it
        if "plot" in outputs:
            from trainsim.scenarios.plots import plot_timeline

            write_atomic(outputs["plot"], lambda tmp: plot_timeline(result, tmp))
            written.append(outputs["plot"])
        if "breakdown" in outputs:
            from trainsim.scenarios.plots import plot_breakdown

            write_atomic(outputs["breakdown"], lambda tmp: plot_breakdown(
                result.breakdown, tmp, title=f"{pred.scenario.name}: critical stage replica"))
    except BaseException:
        remove_outputs(written)
        raise
    run_time = None if tokens is None else time_to_train(pred.scenario, result.iteration_s, tokens, "simulated")
    if args.json:
        print_json(with_run_time(sim.to_dict(), run_time))
        return 0
    print(render(pred, result))
    if run_time is not None:
        print(run_time.text())
    for opt, path in outputs.items():
        print(f"wrote {opt}: {path}")
    if sim.trace_note:
        print(f"note: {sim.trace_note}")
    return 0


def _simulated_ms(bar):  # -> Callable[[float], None]
    """Report the simulated time reached, in milliseconds, to a progress reporter."""
    reached = [0]

    def report(now_s: float) -> None:
        ms = int(now_s * 1e3)
        if ms > reached[0]:
            bar.update(ms - reached[0])
            reached[0] = ms

    return report


def render(pred, r) -> str:
    sc = pred.scenario
    par, tr = sc.parallelism, sc.training
    diff = (r.iteration_s - r.eq7_s) / r.eq7_s if r.eq7_s else 0.0
    lines = [
        f"{sc.name}: {sc.model.name} on {sc.cluster.name}, {layout_text(sc)}, "
        f"b={tr.micro_batch}, m={tr.micro_batches}, {tr.precision.value}, "
        f"{tr.resolved_kernels.value} kernels, {r.mode} simulation, profile {pred.profile_label}",
        "",
        f"iteration time (simulated)   {fmt_s(r.iteration_s)}{pred.extrapolated.headline_note()}",
        f"Eq. 7                        {fmt_s(r.eq7_s)}   ({100 * diff:+.1f}%)",
        f"tokens/s                     {r.tokens_per_s:12,.0f}",
        f"MFU                          {100 * r.mfu:11.1f} %",
        f"bubble share                 {100 * r.bubble_share:11.1f} %",
    ]
    lines.append(memory_line(pred))
    lines += ["", f"critical stage replica: stage {r.critical[0]}, replica {r.critical[1]}; where its time went:"]
    total = sum(r.breakdown.values()) or 1.0
    for k, v in r.breakdown.items():
        if k == "host" and v == 0 and not any(st.host_fwd_s for st in pred.costs.stages):
            continue  # no host-cost model for this run (Megatron, or a profile without one): nothing to say
        if k == "cp" and par.cp == 1:
            continue
        lines.append(f"  {k:14} {fmt_s(v)}  {100 * v / total:5.1f} %")
    lines.append("exposed communication on the critical replica: " +
                 ", ".join(f"{k} {fmt_s(v).strip()}" for k, v in r.exposed.items() if k != "cp" or par.cp > 1))
    lines.append(f"simulated {r.events:,} events in {r.sim_wall_s:.3f} s")
    for n in pred.costs.notes:
        lines.append(f"note: {n}")
    if pred.host_band is not None:
        lines.append(pred.host_band.text(r.eq7_s, r.iteration_s))
    return "\n".join(lines)
