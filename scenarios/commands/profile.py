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
    from trainsim.calibration import load_profile

    profile = load_profile(args.name, reference_dir=args.reference_data, cache_dir=args.cache_dir)
    show(profile, args.json)
    return 0


def show(profile, as_json: bool) -> None:
    """Print a fitted profile's per-regressor model selection."""
    from trainsim.scenarios.commands.common import print_json

    rows = profile.selection_report()
    quirks = list(getattr(profile, "quirks", []) or [])
    if as_json:
        print_json({"profile": profile.name, "regressors": rows, "quirks": quirks})
        return
    print(f"profile {profile.name}: {len(rows)} regressors")
    if rows:
        keys = [k for k in rows[0] if k != "params"]
        print("  ".join(f"{k:>14}" for k in keys) + "  params")
        for r in rows:
            print("  ".join(f"{_fmt(r[k]):>14}" for k in keys) + "  " + _fmt(r.get("params", "")))
    if quirks:
        print(f"\n{len(quirks)} data quirks found in the samples (kept as measured):")
        for q in quirks:
            print(f"  {q}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    return str(v)
