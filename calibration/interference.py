"""Compute-communication interference: how much kernels and NCCL collectives slow each other down.

The measurements come from :mod:`calibration.interference_bench` (``interference.csv``, one
row per compute kernel x collective x message size, every figure the slowest rank's median);
this module reads them, fits an :class:`InterferenceModel` and stores it as JSON. It is pure
Python (csv, json, statistics): no torch, no numpy, so the simulation can load a model cheaply.

What is fitted, and why this form
---------------------------------
The bench keeps the link busy with back-to-back collectives for the whole compute loop, so
every row is the "collective in flight" state that the simulation needs wherever a gradient
bucket, a pipeline send or a CP ring step overlaps a kernel. In that state NCCL holds a fixed
set of SMs (its channels, one CTA each) and draws HBM bandwidth for its copies and reductions:

* a GEMM or attention kernel (SM-bound) loses roughly the SM share NCCL holds, which depends
  on the channel count NCCL picked, not on how big the message is;
* a memory-bound kernel loses roughly the HBM bandwidth share NCCL draws;
* the collective loses time when the compute kernels delay the scheduling of its CTAs or
  compete for HBM.

None of these has a parametric form we could trust before the first GPU batch (channel
counts change with NCCL's protocol choice per message size), so the fit is the simplest one
the data layout supports:

* ``compute[kind]``: the **median** over that class's rows (all collectives, all sizes) of
  ``compute_overlap_us / compute_alone_us``: robust to a noisy row, one number per class for
  a simulation that does not know the message size;
* ``compute_by_size[kind]``: the same median per message size, interpolated linearly in
  log2(bytes) between measured sizes and held constant beyond them (size dependence without
  a parametric assumption: NCCL's protocol switches are step-like in size);
* ``collective[kind]`` and ``collective["all"]``: the median of ``coll_overlap_us /
  coll_alone_us`` per compute class and over all rows; ``collective_by_size`` likewise.

Every factor must be finite and >= 1 (overlap never makes anything faster). A median below
1 (noise around "no slowdown") is recorded in ``notes`` with its raw value and the factor is
set to 1.0: never silently. A class with no rows gets 1.0 and a note. Rows whose collective
loop did not cover the whole compute window (``coverage`` < :data:`MIN_COVERAGE`, written by
the bench) would understate the compute slowdown: they are left out of the compute factor,
with a note. Which class an operator belongs to is the caller's choice: linear layers
"gemm", flash attention "attention", norms / elementwise / softmax / optimizer "memory".
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from trainsim.operators.errors import ConfigError, show

#: compute classes, in the order the bench measures them
KINDS = ("gemm", "attention", "memory")
#: collectives the bench runs (``p2p`` is a bidirectional exchange between rank pairs)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "p2p")
CSV_FILE = "interference.csv"
JSON_FILE = "interference.json"
FORMAT = "trainsim-interference/1"
#: a row whose collectives covered less of the compute window understates the compute slowdown
MIN_COVERAGE = 0.95

#: the columns of interference.csv; the first group is what the fit needs
REQUIRED_COLUMNS = ("compute", "collective", "coll_bytes", "compute_alone_us", "compute_overlap_us",
                    "coll_alone_us", "coll_overlap_us")
COLUMNS = ("gpu", "world", "compute", "compute_shape", "compute_flops", "collective", "coll_bytes",
           "compute_alone_us", "compute_overlap_us", "coll_alone_us", "coll_overlap_us",
           "compute_slowdown", "coll_slowdown", "repeats",
           # how the overlap was measured (see interference_bench): calls per loop, completions
           # inside the compute window, share of the window covered by collectives, warnings
           "compute_calls", "coll_calls", "coll_calls_in_window", "coverage", "flags")


@dataclass(frozen=True)
class Measurement:
    """One row of interference.csv (times in microseconds per call, slowest rank, median of repeats)."""

    compute: str
    collective: str
    coll_bytes: int
    compute_alone_us: float
    compute_overlap_us: float
    coll_alone_us: float
    coll_overlap_us: float | None  # None: too few collective completions inside the compute window
    compute_shape: str = ""
    coverage: float | None = None  # None: not recorded (hand-made rows)

    @property
    def compute_slowdown(self) -> float:
        return self.compute_overlap_us / self.compute_alone_us

    @property
    def coll_slowdown(self) -> float | None:
        return None if self.coll_overlap_us is None else self.coll_overlap_us / self.coll_alone_us


def _number(where: str, col: str, value: object, *, optional: bool = False) -> float | None:
    """A positive finite number from a cell (text or number); empty only where ``optional``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if optional:
            return None
        raise ConfigError(where, f"column '{col}': missing value")
    if isinstance(value, bool):
        raise ConfigError(where, f"column '{col}': not a number: {show(value)}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(where, f"column '{col}': not a number: {show(value)}") from None
    if not (math.isfinite(x) and x > 0):
        raise ConfigError(where, f"column '{col}': must be a positive finite number, got {show(value)}")
    return x


def measurement(row: Mapping[str, object] | Measurement, where: str = "row") -> Measurement:
    """A validated :class:`Measurement` from a CSV row or a hand-made mapping."""
    if isinstance(row, Measurement):
        row = {k: getattr(row, k) for k in (*REQUIRED_COLUMNS, "compute_shape", "coverage")}
    for col in REQUIRED_COLUMNS:
        if col not in row:
            raise ConfigError(where, f"missing column '{col}'")
    kind = str(row["compute"]).strip()
    if kind not in KINDS:
        raise ConfigError(where, f"column 'compute': {show(row['compute'])} is not one of {', '.join(KINDS)}")
    coll = str(row["collective"]).strip()
    if coll not in COLLECTIVES:
        raise ConfigError(where, f"column 'collective': {show(row['collective'])} is not one of "
                          + ", ".join(COLLECTIVES))
    nbytes = _number(where, "coll_bytes", row["coll_bytes"])
    assert nbytes is not None
    if nbytes != int(nbytes):
        raise ConfigError(where, f"column 'coll_bytes': not an integer: {show(row['coll_bytes'])}")
    vals = {c: _number(where, c, row[c], optional=(c == "coll_overlap_us"))
            for c in ("compute_alone_us", "compute_overlap_us", "coll_alone_us", "coll_overlap_us")}
    coverage = row.get("coverage")
    cov: float | None = None
    if coverage is not None and not (isinstance(coverage, str) and not coverage.strip()):
        cov = _number(where, "coverage", coverage)
    return Measurement(kind, coll, int(nbytes), vals["compute_alone_us"], vals["compute_overlap_us"],  # type: ignore[arg-type]
                       vals["coll_alone_us"], vals["coll_overlap_us"],  # type: ignore[arg-type]
                       str(row.get("compute_shape", "") or ""), cov)


def read_rows(path: str | os.PathLike) -> list[Measurement]:
    """The validated rows of an interference.csv; bad files raise ConfigError naming file:line and column."""
    path = Path(path)
    try:
        fh = path.open(newline="")
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    out = []
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None)
            if header is None:
                raise ConfigError(str(path), "empty file (no header)")
            header = [c.strip() for c in header]
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise ConfigError(f"{path}:1", f"missing column(s) {', '.join(repr(c) for c in missing)}")
            for cells in reader:
                where = f"{path}:{reader.line_num}"
                if not cells or all(not c.strip() for c in cells):
                    continue
                if len(cells) != len(header):
                    raise ConfigError(where, f"expected {len(header)} columns, got {len(cells)}")
                out.append(measurement(dict(zip(header, cells, strict=True)), where))
        except (csv.Error, UnicodeDecodeError) as e:
            raise ConfigError(str(path), f"not a readable CSV: {e}") from None
    return out


def format_row(values: Mapping[str, object]) -> list[str]:
    """Cells of one interference.csv row in :data:`COLUMNS` order (missing ones empty)."""
    out = []
    for col in COLUMNS:
        v = values.get(col)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append("")
        elif isinstance(v, float):
            out.append(f"{v:.6g}")
        else:
            out.append(str(v))
    return out


def _interp(points: Sequence[tuple[int, float]], nbytes: float) -> float:
    """Linear in log2(bytes) between measured sizes, constant beyond the ends."""
    if nbytes <= points[0][0]:
        return points[0][1]
    if nbytes >= points[-1][0]:
        return points[-1][1]
    x = math.log2(nbytes)
    for (b0, f0), (b1, f1) in zip(points[:-1], points[1:], strict=True):
        if b0 <= nbytes <= b1:
            x0, x1 = math.log2(b0), math.log2(b1)
            return f0 + (f1 - f0) * (x - x0) / (x1 - x0)
    return points[-1][1]  # pragma: no cover - the loop covers every interior size


def _check_factor(field_name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field_name, f"must be a number, got {show(value)}")
    if not math.isfinite(value) or value < 1.0:
        raise ConfigError(field_name, f"must be a finite factor >= 1, got {show(value)}")
    return float(value)


def _check_table(field_name: str, value: object) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(field_name, f"must be a non-empty list of [bytes, factor] pairs, got {show(value)}")
    out = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ConfigError(f"{field_name}[{i}]", f"must be a [bytes, factor] pair, got {show(pair)}")
        b, f = pair
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ConfigError(f"{field_name}[{i}]", f"bytes must be a positive integer, got {show(b)}")
        out.append((b, _check_factor(f"{field_name}[{i}]", f)))
    if any(b1 <= b0 for (b0, _), (b1, _) in zip(out[:-1], out[1:], strict=True)):
        raise ConfigError(field_name, "sizes must be strictly increasing")
    return tuple(out)


@dataclass(frozen=True)
class InterferenceModel:
    """Slowdown factors while compute and a collective overlap on one GPU (1.0: no interference).

    ``compute[kind]``: a ``kind`` kernel's time with a collective in flight over its time alone;
    ``collective[kind]`` (and ``["all"]``): a collective's time while ``kind`` kernels run over
    its time alone; ``*_by_size``: the same per message size (bytes as in ``Collective.bytes``).
    """

    compute: Mapping[str, float]
    collective: Mapping[str, float]
    compute_by_size: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    collective_by_size: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    source: str = ""
    rows: int = 0

    def __post_init__(self) -> None:
        comp = {k: _check_factor(f"interference.compute.{k}", v) for k, v in dict(self.compute).items()}
        coll = {k: _check_factor(f"interference.collective.{k}", v) for k, v in dict(self.collective).items()}
        if set(comp) != set(KINDS):
            raise ConfigError("interference.compute", f"needs exactly the classes {', '.join(KINDS)}, "
                              f"got {', '.join(sorted(comp)) or 'none'}")
        if set(coll) != {"all", *KINDS}:
            raise ConfigError("interference.collective", f"needs 'all' and {', '.join(KINDS)}, "
                              f"got {', '.join(sorted(coll)) or 'none'}")
        tables = {}
        for name, allowed in (("compute_by_size", set(KINDS)), ("collective_by_size", {"all", *KINDS})):
            tab = {}
            for k, v in dict(getattr(self, name)).items():
                if k not in allowed:
                    raise ConfigError(f"interference.{name}", f"unknown key {show(k)}")
                tab[k] = _check_table(f"interference.{name}.{k}", v)
            tables[name] = MappingProxyType(tab)
        # frozen and truly read-only: a model shared by simulation processes must not drift
        object.__setattr__(self, "compute", MappingProxyType(comp))
        object.__setattr__(self, "collective", MappingProxyType(coll))
        object.__setattr__(self, "compute_by_size", tables["compute_by_size"])
        object.__setattr__(self, "collective_by_size", tables["collective_by_size"])
        object.__setattr__(self, "notes", tuple(str(n) for n in self.notes))

    @classmethod
    def none(cls) -> InterferenceModel:
        """The neutral model: nothing slows down (the simulation's behaviour before this issue)."""
        return cls({k: 1.0 for k in KINDS}, {"all": 1.0, **{k: 1.0 for k in KINDS}},
                   notes=("neutral model: no interference",), source="none")

    @property
    def is_neutral(self) -> bool:
        tabs = [f for t in (*self.compute_by_size.values(), *self.collective_by_size.values()) for _, f in t]
        return all(v == 1.0 for v in (*self.compute.values(), *self.collective.values(), *tabs))

    def compute_factor(self, kind: str, coll_bytes: float | None = None) -> float:
        """Slowdown of a ``kind`` kernel ("gemm", "attention", "memory") while a collective runs.

        With ``coll_bytes`` (the collective's ``Collective.bytes``) and a per-size table, the
        factor at that size (log-size interpolation, constant beyond the measured sizes).
        """
        if kind not in KINDS:
            raise ConfigError("interference kind", f"{show(kind)} is not one of {', '.join(KINDS)}")
        tab = self.compute_by_size.get(kind)
        if coll_bytes is not None and tab:
            return _interp(tab, coll_bytes)
        return self.compute[kind]

    def measured_sizes(self) -> tuple[int, int] | None:
        """The smallest and the largest message size of the per-size tables (None: none): beyond
        them a factor is the nearest measured size's."""
        sizes = [b for tab in (*self.compute_by_size.values(), *self.collective_by_size.values()) for b, _ in tab]
        return (min(sizes), max(sizes)) if sizes else None

    def collective_factor(self, kind: str | None = None, coll_bytes: float | None = None) -> float:
        """Slowdown of a collective while compute runs (``kind``: the compute class, None: any)."""
        key = "all" if kind is None else kind
        if key not in self.collective:
            raise ConfigError("interference kind", f"{show(kind)} is not one of {', '.join(KINDS)}")
        tab = self.collective_by_size.get(key)
        if coll_bytes is not None and tab:
            return _interp(tab, coll_bytes)
        return self.collective[key]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "compute": dict(self.compute), "collective": dict(self.collective),
                "compute_by_size": {k: [list(p) for p in v] for k, v in self.compute_by_size.items()},
                "collective_by_size": {k: [list(p) for p in v] for k, v in self.collective_by_size.items()},
                "notes": list(self.notes), "source": self.source, "rows": self.rows}

    @classmethod
    def from_dict(cls, data: object, where: str = "interference") -> InterferenceModel:
        if not isinstance(data, Mapping):
            raise ConfigError(where, f"must be a JSON object, got {show(data)}")
        if data.get("format") != FORMAT:
            raise ConfigError(f"{where}.format", f"must be {FORMAT!r}, got {show(data.get('format'))}")
        for key in ("compute", "collective"):
            if not isinstance(data.get(key), Mapping):
                raise ConfigError(f"{where}.{key}", f"must be an object of factors, got {show(data.get(key))}")
        tabs = {}
        for key in ("compute_by_size", "collective_by_size"):
            v = data.get(key, {})
            if not isinstance(v, Mapping):
                raise ConfigError(f"{where}.{key}", f"must be an object, got {show(v)}")
            tabs[key] = v
        notes = data.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ConfigError(f"{where}.notes", "must be a list of strings")
        rows = data.get("rows", 0)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ConfigError(f"{where}.rows", f"must be a non-negative integer, got {show(rows)}")
        try:
            return cls(dict(data["compute"]), dict(data["collective"]), tabs["compute_by_size"],
                       tabs["collective_by_size"], tuple(notes), str(data.get("source", "")), rows)
        except ConfigError as e:  # name the file, not only the field
            raise ConfigError(f"{where}: {e.field}", e.message) from None


def _median_factor(values: Sequence[float], what: str, notes: list[str]) -> float:
    """The median of measured ratios as a factor >= 1; a median below 1 is clamped WITH a note."""
    raw = statistics.median(values)
    if raw < 1.0:
        notes.append(f"{what}: measured median {raw:.4f} < 1 (noise: overlap cannot speed anything up); "
                     f"factor set to 1.0 ({len(values)} rows)")
        return 1.0
    return raw


def fit_interference(rows: Iterable[Mapping[str, object] | Measurement], source: str = "") -> InterferenceModel:
    """Fit the per-class medians (see the module docstring) to measurement rows."""
    ms = [measurement(r, f"row {i + 1}") for i, r in enumerate(rows)]
    if not ms:
        raise ConfigError(source or "interference rows", "no measurements to fit")
    notes: list[str] = []
    low_cov = [m for m in ms if m.coverage is not None and m.coverage < MIN_COVERAGE]
    if low_cov:
        notes.append(f"{len(low_cov)} row(s) left out of the compute factors: the collectives covered less than "
                     f"{MIN_COVERAGE:.0%} of the compute window (e.g. {low_cov[0].compute} "
                     f"{low_cov[0].compute_shape} / {low_cov[0].collective} {low_cov[0].coll_bytes} B)")
    no_coll = [m for m in ms if m.coll_overlap_us is None]
    if no_coll:
        notes.append(f"{len(no_coll)} row(s) without a collective time under overlap (fewer than two completions "
                     "inside the compute window) left out of the collective factors")
    comp_rows = [m for m in ms if m.coverage is None or m.coverage >= MIN_COVERAGE]
    coll_rows = [m for m in ms if m.coll_overlap_us is not None]

    compute: dict[str, float] = {}
    compute_by_size: dict[str, tuple[tuple[int, float], ...]] = {}
    for kind in KINDS:
        mine = [m for m in comp_rows if m.compute == kind]
        if not mine:
            notes.append(f"compute {kind}: not measured; factor 1.0")
            compute[kind] = 1.0
            continue
        compute[kind] = _median_factor([m.compute_slowdown for m in mine], f"compute {kind}", notes)
        sizes = sorted({m.coll_bytes for m in mine})
        compute_by_size[kind] = tuple(
            (b, _median_factor([m.compute_slowdown for m in mine if m.coll_bytes == b], f"compute {kind} @ {b} B",
                               notes)) for b in sizes)

    collective: dict[str, float] = {}
    collective_by_size: dict[str, tuple[tuple[int, float], ...]] = {}
    for key in ("all", *KINDS):
        mine = [m for m in coll_rows if key == "all" or m.compute == key]
        if not mine:
            notes.append(f"collective under {key}: not measured; factor 1.0")
            collective[key] = 1.0
            continue
        collective[key] = _median_factor([m.coll_slowdown for m in mine],  # type: ignore[misc]
                                         f"collective under {key}", notes)
        sizes = sorted({m.coll_bytes for m in mine})
        collective_by_size[key] = tuple(
            (b, _median_factor([m.coll_slowdown for m in mine if m.coll_bytes == b],  # type: ignore[misc]
                               f"collective under {key} @ {b} B", notes)) for b in sizes)
    return InterferenceModel(compute, collective, compute_by_size, collective_by_size, tuple(notes), source, len(ms))


def load_interference(path: str | os.PathLike) -> InterferenceModel:
    """A model from a fitted JSON, an interference.csv (fitted on load), or a folder holding either.

    A folder's ``interference.json`` wins over its ``interference.csv``.
    """
    p = Path(path)
    if p.is_dir():
        if (p / JSON_FILE).is_file():
            p = p / JSON_FILE
        elif (p / CSV_FILE).is_file():
            p = p / CSV_FILE
        else:
            raise ConfigError(str(path), f"holds neither {JSON_FILE} nor {CSV_FILE}")
    if not p.exists():
        raise ConfigError(str(p), "no such file")
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(p.read_text())
        except OSError as e:
            raise ConfigError(str(p), f"cannot read: {e.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(str(p), "not a text file") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{e.lineno}", f"invalid JSON: {e.msg}") from None
        return InterferenceModel.from_dict(data, str(p))
    return fit_interference(read_rows(p), source=str(p))


def save_interference(model: InterferenceModel, path: str | os.PathLike) -> Path:
    """Write ``model`` as JSON, whole or not at all (temporary file, then rename)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(model.to_dict(), indent=2) + "\n")
    os.replace(tmp, p)
    return p
