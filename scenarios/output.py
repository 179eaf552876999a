"""Output files: checked before any work, written whole or not at all.

Library code (the API, traces, plots) and the CLI share these, so a file is never left
half-written and a bad path fails before a long run, naming the option.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from trainsim.operators.errors import ConfigError

#: what each kind of output can be written as (checked before any work)
TRACE_SUFFIXES = (".json",)
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_writable(path: str | os.PathLike[str], option: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """Fail before any work if an output cannot be written.

    ``path`` must be a file name (not a folder) in an existing folder where a file can really be
    created: a temporary file is made and removed there (``os.access`` is not enough: root may
    "write" to /proc, a read-only mount says yes). With ``suffixes``, the extension must be one of
    them (the format is chosen by it).
    """
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise ConfigError(option, f"{str(path)!r} is not a file name")
    if p.is_dir():
        raise ConfigError(option, f"{str(p)!r} is a folder; give a file name")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ConfigError(option, f"{str(path)!r}: cannot write a {p.suffix or 'file without an extension'}; "
                                  f"give a file name ending in {', '.join(suffixes)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(option, f"folder {str(parent)!r} does not exist")
    err = write_error(parent)
    if err is not None:
        raise ConfigError(option, f"cannot write in folder {str(parent)!r}: {err}")
    return p


def write_error(folder: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be created in ``folder`` (None if it can): a temporary file is made and
    removed there, since ``os.access`` says yes to root on /proc or on a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".trainsim-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return str(e.strerror or e)
    return None


def remove_outputs(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Remove outputs a command already wrote, when a later one failed (nothing half-done is left)."""
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


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
