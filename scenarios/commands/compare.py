"""``trainsim compare``: Eq. 7 beside the simulation, every difference attributed to a cause."""

from __future__ import annotations

import argparse

from trainsim.scenarios.commands.common import add_scenario_args, fit_progress, fmt_s, load, print_json, warn


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="Eq. 7 beside the simulation, with the difference attributed by cause")
    add_scenario_args(p)
    p.add_argument("--ideal", action="store_true", help="compare with the ideal simulation (should be ~0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim import api

    with fit_progress(args) as fitbar:
        c = api.compare(load(args), ideal=args.ideal, reference_data=args.reference_data, cache_dir=args.cache_dir,
                        max_events=getattr(args, "max_events", None),
                        fit_progress=fitbar)
    warn(c.warnings, quiet=args.quiet)
    if args.json:
        print_json(c.to_dict())
        return 0
    print(f"{c.scenario}: Eq. 7 {fmt_s(c.eq7_s).strip()}, simulation {fmt_s(c.sim_s).strip()} "
          f"({100 * c.result.rel_diff:+.2f}%)")
    print("difference by cause (each switched on in turn, in this order):")
    for cause, v in c.attribution.items():
        print(f"  {cause:22} {v * 1e3:+12.3f} ms")
    print(f"  {'total':22} {(c.sim_s - c.eq7_s) * 1e3:+12.3f} ms")
    inside = c.interference_in_steps_s
    if any(v > 0 for v in inside):
        worst = max(range(len(inside)), key=inside.__getitem__)
        print(f"measured interference inside the stage times (FSDP2 gathers, CP ring; Eq. 7 and simulation alike): "
              f"up to {inside[worst] * 1e3:.3f} ms per micro-batch (stage {worst})")
    capped = c.power_cap_s
    if any(v != 0 for v in capped):
        worst = max(range(len(capped)), key=lambda i: abs(capped[i]))
        print(f"measured power cap inside the stage times (Eq. 7 and simulation alike; profile.power_cap): "
              f"{capped[worst] * 1e3:+.3f} ms per micro-batch against the samples (stage {worst}; negative where "
              f"the samples of long kernels had been timed more capped than the run runs them)")
    return 0
