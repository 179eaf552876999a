"""``python -m trainsim.calibration.merge_collectives OUT IN [IN ...]``: one profile table from bench runs.

``collectives_bench`` already writes the profile schema, so one run's ``collectives.csv`` can be
copied into ``calibration/profiles/<name>/`` as it is; this joins several runs (hosts of
different sizes, resumed runs in separate folders) into one file, validating every row
(:func:`calibration.collective_curve.merge_tables`). It lives apart from ``collective_curve``
because ``calibration`` imports that module, and ``python -m`` on an already imported module warns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainsim.calibration.merge_collectives",
                                description="concatenate collectives_bench tables (validated) into one collectives.csv")
    p.add_argument("out", help="the merged table, e.g. calibration/profiles/h100-sxm-bf16/collectives.csv")
    p.add_argument("inputs", nargs="+", help="collectives.csv files written by collectives_bench")
    args = p.parse_args(argv)
    from trainsim.calibration.collective_curve import merge_tables
    from trainsim.operators.errors import ConfigError

    try:
        n = merge_tables(args.inputs, args.out)
    except (ConfigError, ValueError, OSError) as e:
        print(f"merge_collectives: {e}", file=sys.stderr)
        return 2
    print(f"{n} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
