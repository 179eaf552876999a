"""trainsim: predict the iteration time of pipeline/tensor/data-parallel LLM training (README.md).

The command line. Each command lives in ``scenarios/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a
``run(args) -> int``. Bad input of any kind ends in one line on stderr and exit
status 2; nothing is half-written (outputs are written only after success).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from trainsim.operators import ConfigError

COMMANDS = ("predict", "run", "compare", "sweep", "jitter", "scenarios", "fit", "profile", "calibrate",
            "calibrate_collectives", "calibrate_power", "validate")
#: two-word commands, spelled with a hyphen inside the parser
ALIASES = {("calibrate", "collectives"): "calibrate-collectives", ("calibrate", "power"): "calibrate-power"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"trainsim: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``only`` (a command's name as typed) when it is one:
    then no other command module is imported (``trainsim predict`` does not pay for torch's
    collective benchmark's imports)."""
    parser = _Parser(prog="trainsim", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    module_name = None if only is None else only.replace("-", "_")
    names = [module_name] if module_name in COMMANDS else COMMANDS
    for name in names:
        try:
            module = importlib.import_module(f"trainsim.scenarios.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"trainsim.scenarios.commands.{name}":
                continue  # a command whose module is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if tuple(argv[:2]) in ALIASES:
        argv = [ALIASES[tuple(argv[:2])], *argv[2:]]
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    args = parser.parse_args(argv)
    args.raw_argv = argv[1:]
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"trainsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trainsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
