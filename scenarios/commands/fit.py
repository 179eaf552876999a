"""``trainsim fit``: fit (and cache) a profile from a folder of samples in our sample-table format."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit regressors on a folder of samples and cache them as a profile")
    p.add_argument("samples", help="folder holding compute.csv (and optionally collectives.csv, meta.json); "
                                   "use the same path as profile.name in a scenario")
    p.add_argument("--cache-dir", default=None, help="default: $TRAINSIM_CACHE or ~/.cache/trainsim")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trainsim.calibration import load_profile
    from trainsim.operators import ConfigError
    from trainsim.scenarios.commands.profile import show

    if not Path(args.samples).is_dir():
        raise ConfigError(args.samples, "no such samples folder")

    def progress(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"trainsim: {msg}", file=sys.stderr)

    profile = load_profile(args.samples, cache_dir=args.cache_dir, progress=progress)
    show(profile, args.json)
    return 0
