"""``trainsim scenarios``: list the bundled scenarios."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenarios", help="list the bundled scenarios")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from trainsim.scenarios.commands.common import print_json
    from trainsim.scenarios.schema import BUNDLED_DIR, bundled_names

    rows = []
    for name in bundled_names():
        data = yaml.safe_load((BUNDLED_DIR / f"{name}.yaml").read_text()) or {}
        par = data.get("parallelism", {})
        rows.append({
            "name": name,
            "model": (data.get("model") or {}).get("preset", "custom"),
            "layout": f"{par.get('pp', 1)}-{par.get('mp', 1)}-{par.get('dp', 1)}",
            "cluster": (data.get("cluster") or {}).get("preset", "custom"),
            "profile": (data.get("profile") or {}).get("name", "roofline"),
            "description": data.get("description", ""),
        })
    if args.json:
        print_json(rows)
        return 0
    print(f"{'name':38} {'model':10} {'PP-MP-DP':9} {'cluster':11} profile")
    for r in rows:
        print(f"{r['name']:38} {r['model']:10} {r['layout']:9} {r['cluster']:11} {r['profile']}")
    return 0
