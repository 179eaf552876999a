"""``trainsim fit``: fit (and cache) a profile from a folder of samples in our sample-table format."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit regressors on a folder of samples and cache them as a profile")
    p.add_argument("samples", help="folder holding compute.csv (and optionally collectives.csv, meta.json); "
                                   "use the same path as profile.name in a scenario")
    p.add_argument("--cache-dir", default=None, help="default: $TRAINSIM_CACHE or ~/.cache/trainsim")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no warnings (errors still print)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from trainsim.calibration import load_profile
    from trainsim.operators import ConfigError
    from trainsim.scenarios.commands.common import warn
    from trainsim.scenarios.commands.profile import show
    from trainsim.scenarios.progress import Progress

    if not Path(args.samples).is_dir():
        raise ConfigError(args.samples, "no such samples folder")

    # data quirks and the fitting libraries' warnings go to one short block, not raw lines
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Progress("fit", None, unit="regressors", quiet=args.quiet) as bar:
            profile = load_profile(args.samples, cache_dir=args.cache_dir, progress=bar.update,
                                   on_total=bar.set_total)
    show(profile, args.json)
    hidden = (DeprecationWarning, PendingDeprecationWarning, ImportWarning)  # hidden by Python's default filters
    warn([str(w.message) for w in caught if not issubclass(w.category, hidden)], quiet=args.quiet)
    return 0
