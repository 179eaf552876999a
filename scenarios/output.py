"""Output files: checked before any work, written whole or not at all.

Library code (the API, traces, plots) and the CLI share these, so a file is never left
half-written and a bad path fails before a long run, naming the option.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainsim.operators.errors import ConfigError


def check_writable(path: str | os.PathLike[str], option: str) -> Path:
    """Fail before any work if an output cannot be written (folder missing or read-only, a directory)."""
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise ConfigError(option, f"{str(path)!r} is not a file name")
    if p.is_dir():
        raise ConfigError(option, f"{str(p)!r} is a folder; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(option, f"folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(option, f"folder {str(parent)!r} is not writable")
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, write: Callable[[str], object]) -> None:
    """Write through a temporary file in the same folder, then rename: never half a file.

    The file gets the mode a plain ``open(path, "w")`` would give (0666 less the umask),
    not ``mkstemp``'s 0600.
    """
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.tmp.", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
