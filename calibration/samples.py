"""Our sample-table schema: what a micro-benchmark harness writes and a profile is fitted on.

A sample directory holds up to three files:

``compute.csv``
    ``op,direction,b,l,d,h,mp,v,f,layers,duration_us`` (optional trailing ``iteration``).
    ``op`` is an :class:`operators.ops.OpKind` value, ``direction`` ``fwd``/``bwd`` for
    kernels and ``update`` for the optimizer kinds. The shape columns are the raw
    :class:`operators.ops.Op` fields, so the regressor features (Table I) are derived,
    never stored: one table serves any feature definition.
``collectives.csv``
    ``collective,entries,nodes,gpus_per_node,duration_us`` (optional ``iteration``).
    ``collective`` is a :class:`operators.ops.CollKind` value; ``entries`` counts
    2-byte elements.
``meta.json``
    free-form object (gpu, precision, driver, torch/cuda versions, ...).

Durations are microseconds. ``iteration`` (the repeat index of one shape) is kept for
jitter fits and ignored by the regressors. The writer appends one row at a time and
flushes, so an interrupted harness resumes where it stopped.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind

COMPUTE_COLUMNS = ("op", "direction", "b", "l", "d", "h", "mp", "v", "f", "layers", "duration_us")
COLLECTIVE_COLUMNS = ("collective", "entries", "nodes", "gpus_per_node", "duration_us")
OPTIONAL_COLUMN = "iteration"
# compute tables may carry the QKV projection's key/value heads (Op.kv; 0 or absent: multi-head)
# after duration_us and before iteration; tables written now always do
KV_COLUMN = "kv"
COMPUTE_FILE = "compute.csv"
COLLECTIVE_FILE = "collectives.csv"
META_FILE = "meta.json"

_SHAPE_FIELDS = ("b", "l", "d", "h", "mp", "v", "f", "layers")


class DataQuirkWarning(UserWarning):
    """Samples that look wrong (outliers, backward faster than forward). They are kept."""


@dataclass(frozen=True, slots=True)
class ComputeSample:
    op: Op
    direction: Direction
    duration_us: float
    iteration: int | None = None


@dataclass(frozen=True, slots=True)
class CollectiveSample:
    coll: Collective
    duration_us: float
    iteration: int | None = None


@dataclass(frozen=True)
class SampleSet:
    """The contents of one sample directory (or a converted reference folder)."""

    compute: tuple[ComputeSample, ...]
    collectives: tuple[CollectiveSample, ...]
    meta: dict = field(default_factory=dict)
    files: tuple[Path, ...] = ()  # the files read, for the data hash


def check_direction(kind: OpKind, direction: Direction) -> bool:
    """Optimizers have one duration ("update"); every other kernel fwd and bwd."""
    return (direction is Direction.UPDATE) == kind.is_optimizer


# ----------------------------------------------------------------------------- reading


def _int(where: str, col: str, text: str, minimum: int) -> int:
    try:
        x = float(text)
    except ValueError:
        raise ConfigError(where, f"column '{col}': not a number: {text!r}") from None
    if not math.isfinite(x) or x != int(x):
        raise ConfigError(where, f"column '{col}': not an integer: {text!r}")
    if x < minimum:
        raise ConfigError(where, f"column '{col}': must be >= {minimum}, got {text}")
    return int(x)


def _duration(where: str, text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ConfigError(where, f"column 'duration_us': not a number: {text!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ConfigError(where, f"column 'duration_us': must be a positive finite number, got {text}")
    return x


def _rows(path: Path, columns: Sequence[str]) -> Iterable[tuple[str, dict[str, str]]]:
    """Yield (``file:line``, row) after checking the header."""
    try:
        fh = path.open(newline="")
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return
        header = [c.strip() for c in header]
        if header not in _headers(columns):
            extra = f"[,{KV_COLUMN}]" if columns == COMPUTE_COLUMNS else ""
            raise ConfigError(f"{path}:1",
                              f"header must be {','.join(columns)}{extra}[,{OPTIONAL_COLUMN}], got {','.join(header)}")
        for cells in reader:
            where = f"{path}:{reader.line_num}"
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise ConfigError(where, f"expected {len(header)} columns, got {len(cells)}")
            yield where, dict(zip(header, (c.strip() for c in cells), strict=True))


def _headers(columns: Sequence[str]) -> list[list[str]]:
    """The headers a table of ``columns`` may have: optional kv (compute tables), optional iteration."""
    kv = [[], [KV_COLUMN]] if tuple(columns) == COMPUTE_COLUMNS else [[]]
    return [[*columns, *k, *it] for k in kv for it in ([], [OPTIONAL_COLUMN])]


def _iteration(where: str, row: dict[str, str]) -> int | None:
    text = row.get(OPTIONAL_COLUMN, "")
    return _int(where, OPTIONAL_COLUMN, text, 0) if text else None


def read_compute(path: str | os.PathLike) -> list[ComputeSample]:
    path = Path(path)
    out = []
    for where, row in _rows(path, COMPUTE_COLUMNS):
        try:
            kind = OpKind(row["op"])
        except ValueError:
            raise ConfigError(where, f"column 'op': unknown operator {row['op']!r}") from None
        try:
            direction = Direction(row["direction"])
        except ValueError:
            raise ConfigError(where, f"column 'direction': must be fwd, bwd or update, "
                                     f"got {row['direction']!r}") from None
        if not check_direction(kind, direction):
            raise ConfigError(where, f"column 'direction': {kind.value} cannot have direction {direction.value}")
        shape = {c: _int(where, c, row[c], 0 if c in ("f", "layers") else 1) for c in _SHAPE_FIELDS}
        if kind.is_optimizer and shape["layers"] < 1:
            raise ConfigError(where, "column 'layers': an optimizer sample needs layers >= 1")
        kv = _int(where, KV_COLUMN, row[KV_COLUMN], 0) if row.get(KV_COLUMN) else 0
        if kv and kind is not OpKind.LINEAR1 and kind is not OpKind.FP8_LINEAR1:
            raise ConfigError(where, f"column 'kv': only the QKV projection has key/value heads, not {kind.value}")
        out.append(ComputeSample(Op(kind, **shape, kv=kv), direction, _duration(where, row["duration_us"]),
                                 _iteration(where, row)))
    return out


def read_collectives(path: str | os.PathLike) -> list[CollectiveSample]:
    path = Path(path)
    out = []
    for where, row in _rows(path, COLLECTIVE_COLUMNS):
        try:
            kind = CollKind(row["collective"])
        except ValueError:
            raise ConfigError(where, f"column 'collective': unknown collective {row['collective']!r}") from None
        coll = Collective(kind, _int(where, "entries", row["entries"], 1), _int(where, "nodes", row["nodes"], 1),
                          _int(where, "gpus_per_node", row["gpus_per_node"], 1))
        out.append(CollectiveSample(coll, _duration(where, row["duration_us"]), _iteration(where, row)))
    return out


def read_meta(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        meta = json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}", f"invalid JSON: {e.msg}") from None
    if not isinstance(meta, dict):
        raise ConfigError(str(path), "must hold a JSON object")
    return meta


def load_sample_dir(path: str | os.PathLike) -> SampleSet:
    """Read a sample directory; at least one of compute.csv / collectives.csv must exist."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(str(root), "sample directory does not exist")
    comp, coll, meta = root / COMPUTE_FILE, root / COLLECTIVE_FILE, root / META_FILE
    if not comp.exists() and not coll.exists():
        raise ConfigError(str(root), f"holds neither {COMPUTE_FILE} nor {COLLECTIVE_FILE}")
    files = tuple(p for p in (comp, coll, meta) if p.exists())
    return SampleSet(
        compute=tuple(read_compute(comp)) if comp.exists() else (),
        collectives=tuple(read_collectives(coll)) if coll.exists() else (),
        meta=read_meta(meta) if meta.exists() else {},
        files=files,
    )


def data_hash(files: Iterable[Path], root: Path | None = None) -> str:
    """sha256 over the files' names (relative to ``root``) and bytes, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(Path(f) for f in files):
        name = p.relative_to(root) if root is not None else Path(p.name)
        h.update(str(name).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


# ----------------------------------------------------------------------------- writing


def _fmt(x: float) -> str:
    return repr(float(x))


def compute_row(s: ComputeSample, kv: bool = True) -> list[str]:
    """A compute table's row; ``kv``: with the kv column."""
    o = s.op
    return [o.kind.value, s.direction.value, *(str(getattr(o, c)) for c in _SHAPE_FIELDS), _fmt(s.duration_us),
            *([str(o.kv)] if kv else [])]


def collective_row(s: CollectiveSample) -> list[str]:
    c = s.coll
    return [c.kind.value, str(c.entries), str(c.nodes), str(c.gpus_per_node), _fmt(s.duration_us)]


def _drop_partial_row(path: Path) -> None:
    """Every row is written with its newline and flushed, so a file not ending in one was
    cut mid-row by a crash: drop that fragment (loudly) so the resumed run re-measures it."""
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    warnings.warn(DataQuirkWarning(f"{path}: dropped an incomplete last row {data[keep:]!r} (interrupted write)"),
                  stacklevel=4)
    with path.open("r+b") as fh:
        fh.truncate(keep)


class SampleWriter:
    """Append-only writer of a sample directory; safe to reopen on a partly written one.

    Rows are validated before writing (an invalid row never reaches the file) and each
    row is flushed, so a crash loses at most the row in flight. Reopening an existing
    file checks its header (with or without ``iteration``) and keeps appending in the
    same layout; :meth:`done_compute` / :meth:`done_collectives` tell a resuming harness
    what is already there.
    """

    def __init__(self, path: str | os.PathLike, meta: dict | None = None, iteration_column: bool = False) -> None:
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self.iteration_column = iteration_column
        self._layout: dict[str, list[str]] = {}
        if meta is not None:
            self.write_meta(meta)

    def write_meta(self, meta: dict) -> None:
        tmp = self.root / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.root / META_FILE)

    def _header(self, name: str, columns: Sequence[str]) -> list[str]:
        """The header of table ``name``: an existing file's (checked), else a new one (written)."""
        if name not in self._layout:
            path = self.root / name
            if path.exists() and path.stat().st_size > 0:
                with path.open(newline="") as fh:
                    header = [c.strip() for c in next(csv.reader(fh), [])]
                if header not in _headers(columns):
                    raise ConfigError(f"{path}:1", f"existing header {','.join(header)} is not ours; cannot append")
                _drop_partial_row(path)
            else:
                header = [*columns, *([KV_COLUMN] if tuple(columns) == COMPUTE_COLUMNS else []),
                          *([OPTIONAL_COLUMN] if self.iteration_column else [])]
                with path.open("w", newline="") as fh:
                    csv.writer(fh).writerow(header)
            self._layout[name] = header
        return self._layout[name]

    def _append(self, name: str, columns: Sequence[str], cells: list[str], iteration: int | None) -> None:
        path = self.root / name
        if self._header(name, columns)[-1] == OPTIONAL_COLUMN:
            cells = [*cells, "" if iteration is None else str(iteration)]
        with path.open("a", newline="") as fh:
            csv.writer(fh).writerow(cells)
            fh.flush()

    def append_compute(self, sample: ComputeSample) -> None:
        if not check_direction(sample.op.kind, sample.direction):
            raise ConfigError("sample", f"{sample.op.kind.value} cannot have direction {sample.direction.value}")
        if not (math.isfinite(sample.duration_us) and sample.duration_us > 0):
            raise ConfigError("sample", f"duration must be positive and finite, got {sample.duration_us!r}")
        kv = KV_COLUMN in self._header(COMPUTE_FILE, COMPUTE_COLUMNS)
        if sample.op.kv and not kv:
            raise ConfigError(str(self.root / COMPUTE_FILE), "this table has no kv column, so it cannot hold a "
                                                             "grouped-query QKV sample; write to a new folder")
        self._append(COMPUTE_FILE, COMPUTE_COLUMNS, compute_row(sample, kv), sample.iteration)

    def append_collective(self, sample: CollectiveSample) -> None:
        if not (math.isfinite(sample.duration_us) and sample.duration_us > 0):
            raise ConfigError("sample", f"duration must be positive and finite, got {sample.duration_us!r}")
        self._append(COLLECTIVE_FILE, COLLECTIVE_COLUMNS, collective_row(sample), sample.iteration)

    def done_compute(self) -> list[ComputeSample]:
        p = self.root / COMPUTE_FILE
        return read_compute(p) if p.exists() else []

    def done_collectives(self) -> list[CollectiveSample]:
        p = self.root / COLLECTIVE_FILE
        return read_collectives(p) if p.exists() else []


def write_samples(path: str | os.PathLike, samples: SampleSet | tuple, meta: dict | None = None) -> Path:
    """Write a whole sample set into a new directory (existing tables are replaced)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    compute, colls = (samples.compute, samples.collectives) if isinstance(samples, SampleSet) else samples
    for name in (COMPUTE_FILE, COLLECTIVE_FILE):
        (root / name).unlink(missing_ok=True)
    SampleWriter(root, meta if meta is not None else getattr(samples, "meta", None) or {})
    for name, columns, rows in ((COMPUTE_FILE, (*COMPUTE_COLUMNS, KV_COLUMN), [compute_row(s) for s in compute]),
                                (COLLECTIVE_FILE, COLLECTIVE_COLUMNS, [collective_row(s) for s in colls])):
        if rows:
            with (root / name).open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(columns)
                w.writerows(rows)
    return root
