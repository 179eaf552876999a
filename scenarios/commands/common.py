"""Options and helpers shared by the scenario-driven commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainsim.scenarios.output import check_writable, write_atomic  # noqa: F401 (re-exported)


def add_scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="a scenario file (YAML) or a bundled scenario name (see `trainsim scenarios`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key, e.g. --set training.micro_batches=8 (repeatable)")
    p.add_argument("--reference-data", metavar="DIR", default=None,
                   help="folder of the reference samples (holds Perlmutter/ and Vista/); "
                        "default: $TRAINSIM_REFERENCE_DATA")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where fitted profiles are cached; default: $TRAINSIM_CACHE or ~/.cache/trainsim")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no warnings (errors still print)")


def load(args: argparse.Namespace):  # -> Scenario; imported lazily to keep --help fast
    from trainsim.scenarios.schema import load_scenario

    return load_scenario(args.scenario, args.overrides)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def warn(messages: Any, quiet: bool = False) -> None:
    """The run's warnings as one short block on stderr (scenarios.progress.summarize_warnings); none: nothing."""
    from trainsim.scenarios.progress import warning_block

    if quiet:
        return
    for line in warning_block(messages):
        print(line, file=sys.stderr)


def fmt_s(x: float) -> str:
    if x >= 1:
        return f"{x:8.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:8.2f} ms"
    return f"{x * 1e6:8.1f} us"


def progress_bar(args: argparse.Namespace, desc: str, total: int | None, unit: str = "it"):  # -> Progress
    """A progress reporter for long work (a bar on a terminal, a line every 10 s elsewhere; --quiet: none)."""
    from trainsim.scenarios.progress import Progress

    return Progress(desc, total, unit=unit, quiet=bool(getattr(args, "quiet", False)))
