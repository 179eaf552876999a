"""Progress reports for long work, and the short warnings block every command prints.

:class:`Progress` reports how far a long job is. On a terminal (its stream is a tty) it is
a tqdm bar; elsewhere (a log file, CI, a pipe) it writes one line at least every
``interval_s`` seconds, e.g. ::

    trainsim: jitter: 312/1000 iterations (31%), 41 s elapsed, about 90 s left

and, when it has written any, a final line. Work shorter than ``interval_s`` writes
nothing off a terminal. ``quiet=True`` silences it.

Library code that runs long takes ``progress: ProgressCallback | None`` ("n more units
done") and calls it; the command line makes a :class:`Progress` and passes its
``update``. (``calibration/`` may not import this module; it accepts a plain
``Callable[[int], None]``, which is the same thing.)

:func:`summarize_warnings` folds a run's warnings into a few lines: messages equal once
numbers and operator names are masked become one line naming the operators affected.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

ProgressCallback = Callable[[int], None]  # "n more units done"

PREFIX = "trainsim"


def format_duration(seconds: float) -> str:
    """``41 s``, ``3 min 12 s``, ``1 h 05 min``."""
    s = max(0, int(round(seconds)))
    if s < 90:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """How far a long job is: a tqdm bar on a terminal, a line every ``interval_s`` elsewhere.

    ``total`` may be None (unknown): the lines then give the count and the elapsed time only.
    Off a terminal, with the real clock (the default ``clock``), a background timer also
    writes a line when ``update`` has not been called for ``interval_s`` (one slow unit
    still shows the job is alive). Use as a context manager or call :meth:`close`.
    """

    def __init__(self, desc: str, total: int | None, *, unit: str = "it", quiet: bool = False,
                 stream: TextIO | None = None, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.desc = desc
        self.total = total if total is None or total >= 0 else 0
        self.unit = unit
        self.quiet = quiet
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.interval_s = float(interval_s)
        self.clock = clock
        self.n = 0
        self.lines = 0  # progress lines written (the non-tty path)
        self._start = clock()
        self._last = self._start
        self._closed = False
        self._lock = threading.Lock()
        self._bar: Any = None
        self._stop: threading.Event | None = None
        self._timer: threading.Thread | None = None
        if quiet:
            return
        if _isatty(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=f"{PREFIX}: {desc}", unit=unit if unit == "it" else f" {unit}",
                             file=self.stream, leave=False, dynamic_ncols=True)
        elif clock is time.monotonic and self.interval_s > 0:
            self._stop = threading.Event()
            self._timer = threading.Thread(target=self._heartbeat, name=f"progress-{desc}", daemon=True)
            self._timer.start()

    # ------------------------------------------------------------------ reporting

    @property
    def mode(self) -> str:
        """``quiet``, ``bar`` (tqdm on a terminal) or ``lines``."""
        return "quiet" if self.quiet else ("bar" if self._bar is not None else "lines")

    def set_total(self, total: int | None) -> None:
        """The total, once known (e.g. a profile's regressor count, found only when its fit starts)."""
        with self._lock:
            self.total = total
            if self._bar is not None:
                self._bar.total = total
                self._bar.refresh()

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        if self._closed:
            return
        with self._lock:
            self.n += n
            if self._bar is not None:
                self._bar.update(n)
                return
            if self.quiet:
                return
            now = self.clock()
            if now - self._last >= self.interval_s:
                self._emit(self._line(now), now)

    def _heartbeat(self) -> None:
        assert self._stop is not None
        while not self._stop.wait(min(1.0, self.interval_s)):
            with self._lock:
                now = self.clock()
                if not self._closed and now - self._last >= self.interval_s:
                    self._emit(self._line(now), now)

    def _emit(self, text: str, now: float) -> None:
        try:
            self.stream.write(f"{PREFIX}: {self.desc}: {text}\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: progress is not worth failing for
            pass
        self.lines += 1
        self._last = now

    def _count(self) -> str:
        if self.total:
            return f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
        return f"{self.n} {self.unit}"

    def _line(self, now: float) -> str:
        elapsed = now - self._start
        text = f"{self._count()}, {format_duration(elapsed)} elapsed"
        if self.total and 0 < self.n < self.total:
            text += f", about {format_duration(elapsed * (self.total - self.n) / self.n)} left"
        return text

    def close(self, failed: bool = False) -> None:
        """Stop reporting; off a terminal, a final line if any line was written."""
        if self._closed:
            return
        if self._stop is not None:
            self._stop.set()
        with self._lock:
            self._closed = True
            if self._bar is not None:
                self._bar.close()
                return
            if self.quiet or not self.lines:
                return
            now = self.clock()
            took = format_duration(now - self._start)
            done = self.total is not None and self.n >= self.total and not failed
            self._emit(f"{self._count()}, done in {took}" if done else f"stopped at {self._count()} after {took}",
                       now)
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=2.0)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(failed=bool(exc and exc[0] is not None))


# ----------------------------------------------------------------------------- warnings


def _subject_pattern() -> re.Pattern[str]:
    from trainsim.operators.ops import CollKind, OpKind

    names = sorted({k.value for k in OpKind} | {k.value for k in CollKind}, key=len, reverse=True)
    return re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, names)) + r")"
                      r"(?: \((fwd|bwd|update)\)| over (\d+x\d+) GPUs| \((\d+x\d+)\))?(?![\w-])")


#: an operator or collective named in a message, with its direction or group shape: its subject
_SUBJECT = _subject_pattern()
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FEATURE = re.compile(r"feature (\S+) = ")


def _subject(message: str) -> tuple[str, int] | None:
    """(``linear2 fwd`` / ``all_reduce 8x1``, start) of a message's first subject."""
    m = _SUBJECT.search(message)
    if m is None:
        return None
    return " ".join(p for p in m.groups() if p), m.start()


def _mask(message: str) -> str:
    """The message with its subjects, feature names and numbers masked: similar messages share it."""
    text = _FEATURE.sub("feature <f> = ", _SUBJECT.sub("<op>", message))
    return _NUMBER.sub("#", re.sub(r"\b(?:operator|collective) <op>", "<op>", text))


def _list(items: list[str], limit: int = 6) -> str:
    return ", ".join(items[:limit]) + (f", +{len(items) - limit} more" if len(items) > limit else "")


def _merge_directions(subjects: list[str]) -> list[str]:
    """``linear2 fwd``, ``linear2 bwd`` -> ``linear2 fwd/bwd`` (first-seen order)."""
    merged: dict[str, list[str]] = {}
    for s in subjects:
        name, _, rest = s.partition(" ")
        if rest in ("fwd", "bwd", "update"):
            merged.setdefault(name, []).append(rest)
        else:
            merged.setdefault(s, [])
    return [f"{k} {'/'.join(v)}" if v else k for k, v in merged.items()]


def _render_group(messages: list[str], counts: dict[str, int]) -> str:
    first = messages[0]
    if len(messages) == 1:
        k = counts[first]
        return first if k == 1 else f"{first} (x{k})"
    found = [s for s in (_subject(m) for m in messages) if s]
    subjects = _list(_merge_directions(list(dict.fromkeys(s[0] for s in found))))
    if not found:
        return f"{first} (and {len(messages) - 1} similar)"
    a = found[0][1]
    head = re.sub(r"(?:operator|collective) $", "", first[:a])
    if " is outside the sampled range" in first:
        feats = list(dict.fromkeys(f.group(1) for f in (_FEATURE.search(x) for x in messages) if f))
        of = f" ({', '.join(feats)})" if feats else ""
        how = first.split("]; ", 1)[1] if "]; " in first else "the trees predict the value at the edge of that range"
        return f"{head}{len(messages)} inputs outside the sampled range{of} of {subjects}; {how}"
    return f"{head}{len(messages)} of this kind ({subjects}), e.g. {first[a:]}"


def summarize_warnings(messages: Iterable[str], *, limit: int = 6) -> list[str]:
    """Warnings folded into at most ``limit`` lines (see module doc).

    Exact duplicates count once (``(xN)``); messages equal once numbers and operator names
    are masked become one line with the count and the operators affected; lines keep the
    order of their group's first message. Beyond ``limit`` lines the last says how many more.
    """
    groups: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for raw in messages:
        msg = " ".join(str(raw).split())
        if not msg:
            continue
        if msg in counts:
            counts[msg] += 1
            continue
        counts[msg] = 1
        groups.setdefault(_mask(msg), []).append(msg)
    lines = [_render_group(g, counts) for g in groups.values()]
    limit = max(1, limit)
    if len(lines) > limit:
        rest = len(lines) - (limit - 1)
        lines = lines[:limit - 1] + [f"… and {rest} more (--json lists all)"]
    return lines


def warning_block(messages: Iterable[str], *, limit: int = 6) -> list[str]:
    """The lines :func:`scenarios.commands.common.warn` prints: a header and the summary, or none."""
    msgs = [m for m in (" ".join(str(x).split()) for x in messages) if m]
    if not msgs:
        return []
    return [f"{PREFIX}: warnings ({len(msgs)}):", *(f"  {line}" for line in summarize_warnings(msgs, limit=limit))]
