"""``trainsim profile show NAME``: what a profile was fitted on and which regressor each operator got."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="inspect a duration profile")
    p.add_argument("action", choices=["show"], help="show: the per-operator model selection")
    p.add_argument("name", help="reference:Perlmutter, reference:Vista, h100-sxm-bf16, or a samples folder")
    p.add_argument("--reference-data", metavar="DIR", default=None)
    p.add_argument("--cache-dir", metavar="DIR", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from calibration import load_profile
    from scenarios.commands.common import print_json

    profile = load_profile(args.name, reference_dir=args.reference_data, cache_dir=args.cache_dir)
    rows = profile.selection_report()
    if args.json:
        print_json({"profile": profile.name, "regressors": rows})
        return 0
    print(f"profile {profile.name}: {len(rows)} regressors")
    if rows:
        keys = list(rows[0])
        print("  ".join(f"{k:>14}" for k in keys))
        for r in rows:
            print("  ".join(f"{_fmt(r[k]):>14}" for k in keys))
    return 0


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    return str(v)
