"""``trainsim fit``: fit a named profile from a folder of samples (our sample-table format)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit regressors on a folder of samples and cache them as a named profile")
    p.add_argument("samples", help="folder holding compute.csv (and optionally collectives.csv, meta.json)")
    p.add_argument("--name", default=None, help="profile name (default: the folder's name)")
    p.add_argument("--cache-dir", default=None, help="default: $TRAINSIM_CACHE or ~/.cache/trainsim")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from calibration import load_profile
    from scenarios.commands.common import print_json

    profile = load_profile(args.samples, cache_dir=args.cache_dir)
    rows = profile.selection_report()
    if args.json:
        print_json({"profile": profile.name, "regressors": rows})
        return 0
    print(f"profile {profile.name}: {len(rows)} regressors")
    for r in rows:
        print("  " + "  ".join(f"{k}={v}" for k, v in r.items()))
    return 0
