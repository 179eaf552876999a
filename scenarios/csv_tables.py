"""Reading the measured and published tables the ``validate`` checks take: a bad file is one
ConfigError naming the option or the file, never a traceback."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from trainsim.operators.errors import ConfigError


def read_csv_table(path: str | os.PathLike, option: str, *, comments: bool = False) -> tuple[list[str], list[dict]]:
    """(header, rows) of the CSV at ``path``; ``comments``: lines starting with ``#`` are skipped.
    An unreadable file names ``option``; a file that is not CSV names the file. The caller checks
    the columns and whether there are rows."""
    p = Path(path)
    try:
        fh = p.open(newline="")
    except OSError as e:
        raise ConfigError(option, f"cannot read {p}: {e.strerror}") from None
    with fh:
        try:
            reader = csv.DictReader((row for row in fh if not row.startswith("#")) if comments else fh)
            return list(reader.fieldnames or []), list(reader)
        except (csv.Error, UnicodeDecodeError) as e:
            raise ConfigError(str(p), f"not a CSV table: {e}") from None
