"""Options and helpers shared by the scenario-driven commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainsim.operators import ConfigError


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


def load(args: argparse.Namespace):  # -> Scenario; imported lazily to keep --help fast
    from trainsim.scenarios.schema import load_scenario

    return load_scenario(args.scenario, args.overrides)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def warn(messages: Any) -> None:
    for m in messages:
        print(f"trainsim: warning: {m}", file=sys.stderr)


def check_writable(path: str, option: str) -> Path:
    """Fail before any work if an output cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(option, f"folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(option, f"folder {str(parent)!r} is not writable")
    return p


def write_atomic(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: never half a file."""
    folder = path.parent if str(path.parent) else "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.tmp.", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fmt_s(x: float) -> str:
    if x >= 1:
        return f"{x:8.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:8.2f} ms"
    return f"{x * 1e6:8.1f} us"
