"""``trainsim predict``: the closed-form Eq. 7 iteration time and its breakdown."""

from __future__ import annotations

import argparse

from trainsim.scenarios.commands.common import (
    add_scenario_args,
    add_train_tokens_arg,
    fit_progress,
    fmt_s,
    load,
    print_json,
    train_tokens,
    warn,
    with_run_time,
)
from trainsim.scenarios.compose import layout_text, memory_line
from trainsim.scenarios.time_to_train import time_to_train


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="closed-form Eq. 7 iteration time with its breakdown")
    add_scenario_args(p)
    add_train_tokens_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim import api

    tokens = train_tokens(args)
    with fit_progress(args) as fitbar:
        pred = api.predict(load(args), reference_data=args.reference_data, cache_dir=args.cache_dir,
                           max_events=getattr(args, "max_events", None),
                           fit_progress=fitbar)
    warn(pred.warnings, quiet=args.quiet, extrapolated=pred.extrapolated)
    run_time = None if tokens is None else time_to_train(pred.scenario, pred.iteration_s, tokens, "Eq. 7")
    if args.json:
        print_json(with_run_time(pred.to_dict(), run_time))
        return 0
    print(render(pred))
    if run_time is not None:
        print(run_time.text())
    return 0


def render(pred) -> str:
    sc, e, costs = pred.scenario, pred.eq7, pred.costs
    par, tr = sc.parallelism, sc.training
    m, pp = tr.micro_batches, par.pp
    lines = [
        f"{sc.name}: {sc.model.name} on {sc.cluster.name}, {layout_text(sc)}, "
        f"b={tr.micro_batch}, m={m}, {tr.precision.value}, recompute {tr.recompute.value}, "
        f"{tr.resolved_kernels.value} kernels",
        f"profile: {pred.profile_label}",
        "",
        f"Eq. 7 iteration time            {fmt_s(e.iteration_s)}{pred.extrapolated.headline_note()}",
        pipeline_line(e, m, pp, par.virtual_stages),
        f"  tail: gradient sync + update  {fmt_s(e.tail_s)}",
        f"    first-stage DP all-reduce   {fmt_s(e.first_stage_sync_s)}",
        f"    max update (optim+gather)   {fmt_s(e.max_update_s)}",
        f"  (paper's tail, sync0+maxupd   {fmt_s(e.paper_tail_s)};  "
        f"paper's Eq. 7 {fmt_s(e.paper_iteration_s).strip()})",
        f"tokens/s {pred.tokens_per_s(e.iteration_s):,.0f}   MFU {100 * pred.mfu(e.iteration_s):.1f}% "
        f"(of {sc.cluster.gpu.peak_flops / 1e12:.0f} TFLOP/s peak)",
        memory_line(pred),
        "",
        "stage  enc  params/rank     fwd        bwd     MP(f+b)    P2P(f+b)   DP all-red   optim+gather",
    ]
    for s, p in zip(costs.stages, pred.plans, strict=True):
        lines.append(
            f"{s.index:>5} {p.encoders:>4} {s.params / 1e6:9.1f} M {fmt_s(s.fwd_s)} {fmt_s(s.bwd_s)} "
            f"{fmt_s(s.mp_fwd_s + s.mp_bwd_s)} {fmt_s(s.p2p_fwd_s + s.p2p_bwd_s)} {fmt_s(s.dp_allreduce_s)}  "
            f"{fmt_s(s.update_s)}"
        )
    sharded = [(s, p.fsdp.ranks) for s, p in zip(costs.stages, pred.plans, strict=True) if p.fsdp is not None]
    if sharded:  # the column is what a rank computes with; FSDP stores a shard of it
        s0, ranks = sharded[0]
        lines.append(f"params/rank: the parameters a rank computes with; FSDP keeps 1/{ranks} of them between uses "
                     f"({s0.params / ranks / 1e6:.1f} M on stage {s0.index})")
    for n in costs.notes:
        lines.append(f"note: {n}")
    if pred.host_band is not None:
        lines.append(pred.host_band.text(e.iteration_s, e.iteration_s))
    return "\n".join(lines)


def pipeline_line(e, m: int, pp: int, v: int) -> str:
    if v == 1:
        return (f"  pipeline (m-1+pp)(F+B)        {fmt_s(e.pipeline_s)}   = {m - 1 + pp} x "
                f"({fmt_s(e.max_fwd_s).strip()} + {fmt_s(e.max_bwd_s).strip()})")
    return (f"  pipeline (mv-1+pp)(F+B)/v     {fmt_s(e.pipeline_s)}   = {m * v - 1 + pp}/{v} x "
            f"({fmt_s(e.max_fwd_s).strip()} + {fmt_s(e.max_bwd_s).strip()})  (interleaved, v = {v})")
