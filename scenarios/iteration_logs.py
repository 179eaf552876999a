"""Readers of measured per-iteration times: plain CSV and the training frameworks' log lines.

Every reader returns :class:`IterationSeries` (one per job) in seconds. Formats:

* ``csv``: a header naming a time column (``iteration_ms``, ``iteration_s``, ``time_ms``,
  ``time_s``, ``ms`` or ``seconds``) and optionally ``job``, ``case``, ``cluster`` and
  ``iteration`` (the layout of ``../shared/training-logs/iterations.csv``); or one headerless
  column of seconds. ``#`` comments and blank lines are skipped.
* ``megatron``: Megatron-LM, Megatron-DeepSpeed and GPT-NeoX print one line per log interval,
  ``iteration       10/    1000 | consumed samples: ... | elapsed time per iteration (ms): 1147.6 | ...``
  (``megatron/training/training.py``, ``training_log``; GPT-NeoX ``megatron/training.py``).
* ``deepspeed``: DeepSpeed's ThroughputTimer (``deepspeed/utils/timer.py``) prints
  ``[INFO] [timer.py:260:stop] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=...,
  CurrSamplesPerSec=222.9, MemAllocated=...``; ``CurrSamplesPerSec`` is ``train_batch_size`` over
  the step's time, so the step time is ``batch_size / CurrSamplesPerSec`` (``batch_size`` must be
  given: the global ``train_batch_size``). Older versions print ``0/20, RunningAvgSamplesPerSec=...``.
* ``torchtitan``: ``step: 10  loss:  7.8632  grad_norm: ...  memory: 30.12GiB(31.73%)  tps: 6,842
  tflops: ...  mfu: ...%`` (``torchtitan/components/metrics.py``, ANSI colours stripped); ``tps`` is
  tokens per second per GPU of one model replica, so the step time is the global batch's tokens
  divided by the GPU count, over ``tps`` (``tokens_per_gpu_step`` must be given).

Megatron and torchtitan print one value per *log interval*: with an interval above one
iteration each value is a mean over that many iterations, which narrows the spread; the series
records the interval (``averaged_over``) and the fit warns.

Bad input raises :class:`ConfigError` naming the file (and ``FILE:LINE`` for a bad line).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainsim.operators.errors import ConfigError

FORMATS = ("auto", "csv", "megatron", "deepspeed", "torchtitan")
TIME_COLUMNS = {"iteration_ms": 1e-3, "time_ms": 1e-3, "ms": 1e-3, "iteration_s": 1.0, "time_s": 1.0,
                "seconds": 1.0}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MEGATRON_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(?:\d+|infinity)\s*\|")
_MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+(?:[eE][+-]?\d+)?)")
_DEEPSPEED = re.compile(r"(?:global_step=(\d+)|\]\s*\d+/(\d+)),\s*RunningAvgSamplesPerSec=[^,]*,\s*"
                        r"CurrSamplesPerSec=([0-9.]+(?:[eE][+-]?\d+)?|inf)")
_TORCHTITAN = re.compile(r"\bstep:\s*(\d+)\s+loss:.*?\btps:\s*([0-9,]+)")


@dataclass(frozen=True)
class IterationSeries:
    """The measured iteration times of one job, in log order."""

    source: str  # the file
    job: str  # the job id (CSV column), else the file's stem
    case: str | None  # the bundled scenario it ran (CSV columns case + cluster), if the file says
    iterations: np.ndarray  # iteration numbers (0-based order in the file when it gives none)
    seconds: np.ndarray
    averaged_over: int = 1  # iterations per logged value (a framework's log interval)

    @property
    def label(self) -> str:
        return f"{Path(self.source).name} job {self.job}"


@dataclass(frozen=True)
class Selection:
    """The rows of a series that a fit uses, and those it dropped with the reason."""

    series: IterationSeries
    kept_s: np.ndarray
    dropped: tuple[tuple[int, float, str], ...] = field(default_factory=tuple)  # (iteration, seconds, why)


def read_iteration_log(path: str, fmt: str = "auto", *, batch_size: float | None = None,
                       tokens_per_gpu_step: float | None = None) -> list[IterationSeries]:
    """The series of ``path`` (see module doc); ``fmt="auto"`` recognises the framework lines."""
    if fmt not in FORMATS:
        raise ConfigError("--format", f"unknown log format {fmt!r}; known: {', '.join(FORMATS)}")
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(path, f"cannot read the log: {e.strerror or e}") from None
    if not text.strip():
        raise ConfigError(path, "the log is empty")
    if fmt == "auto":
        fmt = sniff(text)
    if fmt == "megatron":
        out = [_megatron(path, text)]
    elif fmt == "deepspeed":
        out = [_deepspeed(path, text, batch_size)]
    elif fmt == "torchtitan":
        out = [_torchtitan(path, text, tokens_per_gpu_step)]
    else:
        out = _csv(path, text)
    return out


def sniff(text: str) -> str:
    """The format of a log's text: the first framework whose line it contains, else csv."""
    head = _ANSI.sub("", text[:2_000_000])
    for name, pattern in (("megatron", _MEGATRON_MS), ("deepspeed", _DEEPSPEED), ("torchtitan", _TORCHTITAN)):
        if pattern.search(head):
            return name
    return "csv"


def _positive(value: float, where: str, cell: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(where, f"an iteration time must be positive, got {cell!r}")
    return value


def _series(path: str, job: str, case: str | None, iters: list[int], secs: list[float],
            averaged: int = 1) -> IterationSeries:
    return IterationSeries(path, job, case, np.asarray(iters, dtype=int), np.asarray(secs, dtype=float), averaged)


def _interval(iters: list[int]) -> int:
    steps = np.diff(np.asarray(iters))
    steps = steps[steps > 0]
    return int(np.median(steps)) if steps.size else 1


#: what a format's line parser finds on a line: (iteration or None for "the next one", seconds, the
#: text they came from, for errors); None where the line holds no iteration time
Found = tuple[int | None, float, str] | None


def _scan(path: str, text: str, missing: str, parse: Callable[[str], Found]) -> IterationSeries:
    """One series from the lines ``parse`` finds an iteration time on; ``missing`` if none."""
    iters: list[int] = []
    secs: list[float] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        found = parse(line)
        if found is None:
            continue
        it, value, shown = found
        iters.append(len(iters) if it is None else it)
        secs.append(_positive(value, f"{path}:{lineno}", shown))
    if not secs:
        raise ConfigError(path, missing)
    return _series(path, Path(path).stem, None, iters, secs, _interval(iters))


def _megatron(path: str, text: str) -> IterationSeries:
    def parse(line: str) -> Found:
        m = _MEGATRON_MS.search(line)
        if not m:
            return None
        it = _MEGATRON_ITER.search(line)
        return (int(it.group(1)) if it else None), float(m.group(1)) * 1e-3, m.group(1)

    return _scan(path, text, "no 'elapsed time per iteration (ms):' lines found", parse)


def _deepspeed(path: str, text: str, batch_size: float | None) -> IterationSeries:
    if batch_size is None or not batch_size > 0:
        raise ConfigError("--batch-size", "DeepSpeed logs give samples/s; give the global train_batch_size "
                                          "(samples per step) to turn them into seconds")
    size = batch_size

    def parse(line: str) -> Found:
        m = _DEEPSPEED.search(line)
        if not m:
            return None
        rate = float(m.group(3))
        return int(m.group(1) or m.group(2)), (size / rate if rate > 0 else math.inf), m.group(3)

    return _scan(path, text, "no DeepSpeed 'CurrSamplesPerSec=' lines found", parse)


def _torchtitan(path: str, text: str, tokens_per_gpu_step: float | None) -> IterationSeries:
    if tokens_per_gpu_step is None or not tokens_per_gpu_step > 0:
        raise ConfigError("--tokens-per-gpu-step", "torchtitan logs give tokens/s per GPU (tps); give the global "
                                                   "batch's tokens per step divided by the GPU count")
    tokens = tokens_per_gpu_step

    def parse(line: str) -> Found:
        m = _TORCHTITAN.search(_ANSI.sub("", line))
        if not m:
            return None
        tps = float(m.group(2).replace(",", ""))
        return int(m.group(1)), (tokens / tps if tps > 0 else math.inf), m.group(2)

    return _scan(path, text, "no torchtitan 'step: ... tps: ...' lines found", parse)


def _csv(path: str, text: str) -> list[IterationSeries]:
    rows = [(n, [c.strip() for c in r]) for n, r in enumerate(csv.reader(text.splitlines()), start=1)]
    rows = [(n, r) for n, r in rows if any(r) and not r[0].startswith("#")]
    if not rows:
        raise ConfigError(path, "no iteration times found (only comments or blank lines)")
    first_n, first = rows[0]
    header = [c.lower() for c in first]
    if not _is_number(first[0]) and len(first) == 1 and len(rows) > 1 and len(rows[1][1]) == 1:
        rows = rows[1:]  # a one-column file with a header of any name
        header = []
    elif any(_is_number(c) for c in first):
        header = []
    if not header:  # one column of seconds
        secs = []
        for n, r in rows:
            cells = [c for c in r if c]
            if len(cells) != 1:
                raise ConfigError(f"{path}:{n}", f"expected one column of seconds (or a header naming "
                                                 f"{', '.join(TIME_COLUMNS)}), got {len(cells)} cells")
            secs.append(_positive(_number(cells[0], f"{path}:{n}"), f"{path}:{n}", cells[0]))
        return [_series(path, Path(path).stem, None, list(range(len(secs))), secs)]
    time_col = next((c for c in header if c in TIME_COLUMNS), None)
    if time_col is None:
        raise ConfigError(path, f"no iteration-time column in the header {first!r}; expected one of "
                                f"{', '.join(TIME_COLUMNS)}")
    ti, scale = header.index(time_col), TIME_COLUMNS[time_col]
    col = {name: header.index(name) if name in header else None for name in ("job", "case", "cluster", "iteration")}
    groups: dict[str, tuple[str | None, list[int], list[float]]] = {}
    for n, r in rows[1:]:
        if len(r) != len(header):
            raise ConfigError(f"{path}:{n}", f"expected {len(header)} cells as in the header, got {len(r)}")
        job = r[col["job"]] if col["job"] is not None else Path(path).stem
        if not job:
            raise ConfigError(f"{path}:{n}", "empty job cell")
        case = None
        if col["case"] is not None and col["cluster"] is not None:
            case = f"paper-{r[col['case']]}-{r[col['cluster']]}"
        elif col["case"] is not None:
            case = r[col["case"]]
        entry = groups.setdefault(job, (case, [], []))
        if entry[0] != case:
            raise ConfigError(f"{path}:{n}", f"job {job} names two cases, {entry[0]} and {case}")
        it = len(entry[1])
        if col["iteration"] is not None:
            cell = r[col["iteration"]]
            try:
                it = int(cell)
            except ValueError:
                raise ConfigError(f"{path}:{n}", f"iteration must be an integer, got {cell!r}") from None
        entry[1].append(it)
        entry[2].append(_positive(_number(r[ti], f"{path}:{n}") * scale, f"{path}:{n}", r[ti]))
    if not groups:
        raise ConfigError(path, "the header has no rows below it")
    out = []
    for job, (case, iters, secs) in groups.items():
        order = np.argsort(np.asarray(iters), kind="stable")
        out.append(_series(path, job, case, [iters[i] for i in order], [secs[i] for i in order]))
    return out


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _number(cell: str, where: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise ConfigError(where, f"not a number: {cell!r}") from None


def select_rows(series: IterationSeries, drop_first: int = 1, drop_last: int = 1, outlier_factor: float = 3.0,
                min_rows: int = 5) -> Selection:
    """The rows a fit uses (the rule of docs/jitter.md).

    Dropped: the first ``drop_first`` rows (warm-up: allocator, NCCL communicator set-up, data
    loader start), the last ``drop_last`` (end-of-run work such as the final checkpoint), and any
    row above ``outlier_factor`` times the median of the rest (a checkpoint save or evaluation
    inside the timed step; not an iteration). ``outlier_factor`` 0 keeps every middle row.
    """
    n = series.seconds.size
    if drop_first < 0 or drop_last < 0:
        raise ConfigError("--drop-first" if drop_first < 0 else "--drop-last", "must not be negative")
    keep = np.ones(n, dtype=bool)
    why = [""] * n
    for i in range(min(drop_first, n)):
        keep[i], why[i] = False, "warm-up (first rows)"
    for i in range(max(0, n - drop_last), n):
        keep[i], why[i] = False, "end of run (last rows)"
    if outlier_factor and keep.any():
        med = float(np.median(series.seconds[keep]))
        for i in np.flatnonzero(keep & (series.seconds > outlier_factor * med)):
            keep[i], why[i] = False, f"above {outlier_factor:g} x the median {med:.3g} s"
    if keep.sum() < min_rows:
        raise ConfigError(series.source, f"job {series.job}: only {int(keep.sum())} iteration times left after "
                                         f"dropping warm-up, end-of-run and outlier rows; at least {min_rows} needed")
    dropped = tuple((int(series.iterations[i]), float(series.seconds[i]), why[i]) for i in np.flatnonzero(~keep))
    return Selection(series, series.seconds[keep].copy(), dropped)
