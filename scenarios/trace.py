"""Chrome / Perfetto trace JSON of a recorded simulation (opens in ui.perfetto.dev).

One process ("pid") per category of track — stage replicas, DP collectives, links — and
one thread ("tid") per track; every span is a complete event (``ph: "X"``) with
microsecond ``ts``/``dur``. Track and process names come as ``M`` metadata events.

A large run has thousands of stage replicas; by default a trace keeps the *critical* replica
of every stage (the one that finished last), its stage's DP-collective track and the links
that its own transfers used, and says what it left out (``replicas="all"`` keeps every
track). Events are written one by one to a temporary file beside the target, renamed into
place only when complete.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trainsim.operators.errors import ConfigError

if TYPE_CHECKING:
    from trainsim.scenarios.compose import Prediction
    from trainsim.sim.engine import SimResult, Span

_PIDS = {"stages": 1, "collectives": 2, "links": 3}
REPLICA_CHOICES = ("critical", "all")


def _pid(span: Span) -> int:
    if span.cat == "link":
        return _PIDS["links"]
    if "DP collectives" in span.track:
        return _PIDS["collectives"]
    return _PIDS["stages"]


def trace_events(spans: Iterable[Span]) -> Iterator[dict[str, Any]]:
    """The trace's events in file order: process metadata, then each track's metadata and spans."""
    for name, pid in _PIDS.items():
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
    tids: dict[tuple[int, str], int] = {}
    for sp in sorted(spans, key=lambda s: (_pid(s), s.track, s.start_s)):
        pid = _pid(sp)
        key = (pid, sp.track)
        if key not in tids:
            tids[key] = tid = len(tids) + 1
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": sp.track}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        yield {"ph": "X", "name": sp.name, "cat": str(sp.cat), "pid": pid, "tid": tids[key],
               "ts": sp.start_s * 1e6, "dur": max(0.0, sp.end_s - sp.start_s) * 1e6, "args": dict(sp.args)}


def stream_trace(result: SimResult, out: IO[str], other: dict[str, Any] | None = None) -> int:
    """Write the trace document to ``out`` event by event; returns the number of events."""
    meta = {"iteration_s": result.iteration_s, "eq7_s": result.eq7_s, "mode": str(result.mode),
            "seed": result.seed, **(other or {})}
    out.write('{"displayTimeUnit": "ms", "otherData": ')
    out.write(json.dumps(meta, allow_nan=False))
    out.write(', "traceEvents": [\n')
    n = 0
    for ev in trace_events(result.spans):
        if n:
            out.write(",\n")
        out.write(json.dumps(ev, allow_nan=False, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n


def write_chrome_trace(result: SimResult, path: str | os.PathLike[str], other: dict[str, Any] | None = None) -> Path:
    """Write the trace of a recorded ``result`` to ``path`` (streamed; the caller makes it atomic)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        stream_trace(result, f, other)
    return path


def trace_simulation(pred: Prediction, path: Path, *, replicas: str = "critical", ideal: bool = False,
                     record: bool = False, progress: Callable[[float], None] | None = None,
                     ) -> tuple[SimResult, Path, str | None]:
    """Simulate ``pred``'s scenario and write its trace to ``path`` atomically.

    ``replicas="critical"``: a first run finds each stage's critical replica, a second (the same
    seed gives the same iteration, checked) records only those. Returns the result (with every
    span when ``record``), the path, and a note on what the trace left out (None if nothing).
    """
    from trainsim.scenarios.compose import simulate_prediction
    from trainsim.scenarios.output import write_atomic

    if replicas not in REPLICA_CHOICES:
        raise ConfigError("--trace-replicas", f"expected one of {', '.join(REPLICA_CHOICES)}, got {replicas!r}")
    sc = pred.scenario
    total = sc.parallelism.pp * sc.parallelism.dp
    note = None
    if replicas == "all" or sc.parallelism.dp == 1:
        result = traced = simulate_prediction(pred, ideal=ideal, record=True, progress=progress)
    else:
        result = simulate_prediction(pred, ideal=ideal, record=record, progress=progress)
        keep = {(s, r) for s, r in enumerate(result.stage_critical)}
        traced = simulate_prediction(pred, ideal=ideal, record=keep)
        if traced.iteration_s != result.iteration_s:  # pragma: no cover - the simulation is deterministic
            raise RuntimeError("the recorded run differs from the unrecorded one")
        note = (f"the trace keeps the critical replica of each of the {sc.parallelism.pp} stages "
                f"({len(keep)} of {total:,} stage replicas) and the links their traffic used; "
                f"--trace-replicas all keeps every track")
    other = {"scenario": sc.name, "replicas": replicas, "stage_replicas_traced": traced.replicas_recorded,
             "stage_replicas": total}
    write_atomic(path, lambda tmp: write_chrome_trace(traced, tmp, other))
    return result, path, note
