"""Options and helpers shared by the scenario-driven commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainsim.scenarios.output import (  # noqa: F401 (re-exported)
    PLOT_SUFFIXES,
    TRACE_SUFFIXES,
    check_writable,
    remove_outputs,
    write_atomic,
    write_error,
)


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
    p.add_argument("--max-events", type=_event_count, default=None, metavar="N",
                   help="refuse a run that would simulate more SimPy events than this (about 1e5 per second); "
                        "also scales the memory bound (8 GiB per 5e7); default 5e7")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no warnings (errors still print)")


def add_train_tokens_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train-tokens", metavar="N", default=None,
                   help="also the time to train N tokens (2e12, 2T, 300B): iterations, days, GPU-hours and "
                        "node-hours at this iteration time (steady state: no warm-up, checkpoints, evaluation "
                        "or restarts)")


def with_run_time(d: dict, run_time: Any) -> dict:
    """A command's ``--json`` object with the ``--train-tokens`` run under ``time_to_train``, when asked for
    (``run_time``: a :class:`scenarios.time_to_train.TimeToTrain` or None)."""
    if run_time is not None:
        d["time_to_train"] = run_time.to_json()
    return d


def train_tokens(args: argparse.Namespace) -> float | None:
    """``--train-tokens``, checked before any work; None when not given."""
    from trainsim.scenarios.time_to_train import parse_token_count

    text = getattr(args, "train_tokens", None)
    return None if text is None else parse_token_count(text)


def _event_count(text: str) -> int:
    """``--max-events``: a positive integer, also written 5e7."""
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer such as 50000000 or 5e7, got {text!r}") from None
    if not (value >= 1 and value == int(value) and value < 2**63):
        raise argparse.ArgumentTypeError(f"expected a positive integer such as 50000000 or 5e7, got {text!r}")
    return int(value)


def check_input_dirs(args: argparse.Namespace) -> None:
    """--reference-data must be a folder; --cache-dir a folder we can write (or create). Before any work."""
    from pathlib import Path

    from trainsim.operators import ConfigError

    ref = getattr(args, "reference_data", None)
    if ref is not None and not Path(ref).is_dir():
        raise ConfigError("--reference-data", f"{ref!r} is not a folder" if Path(ref).exists()
                          else f"folder {ref!r} does not exist")
    cache = getattr(args, "cache_dir", None)
    if cache is not None:
        p = Path(cache)
        existing = next((q for q in (p, *p.parents) if q.exists()), Path("."))
        if not existing.is_dir():
            raise ConfigError("--cache-dir", f"{str(existing)!r} is not a folder")
        err = write_error(existing)
        if err is not None:
            raise ConfigError("--cache-dir", f"folder {str(existing)!r} is not writable: {err}")


def load(args: argparse.Namespace):  # -> Scenario; imported lazily to keep --help fast
    from trainsim.scenarios.schema import load_scenario

    check_input_dirs(args)
    return load_scenario(args.scenario, args.overrides)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def warn(messages: Any, quiet: bool = False, extrapolated: Any = None) -> None:
    """The run's warnings as short blocks on stderr; none: nothing.

    ``extrapolated`` (a prediction's :class:`trainsim.scenarios.extrapolation.Extrapolation`):
    its block (the inputs priced outside the profile's sampled range, with their share of the
    iteration) comes first and stands for the profile's extrapolation warnings; the others are
    folded as :func:`scenarios.progress.warning_block` does."""
    from trainsim.scenarios.progress import warning_block

    if quiet:
        return
    lines: list[str] = []
    if extrapolated is not None:
        lines += extrapolated.block()
        messages = extrapolated.other_warnings(messages)
    lines += warning_block(messages)
    for line in lines:
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


def fit_progress(args: argparse.Namespace):  # -> Progress
    """Progress of a profile's first fit (silent on a cache hit: it never starts)."""
    return progress_bar(args, "fitting the profile (first use; cached afterwards)", None, unit="regressors")
