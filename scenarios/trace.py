"""Chrome / Perfetto trace JSON of a recorded simulation (opens in ui.perfetto.dev).

One process ("pid") per category of track — stage replicas, DP collectives, links — and
one thread ("tid") per track; every span is a complete event (``ph: "X"``) with
microsecond ``ts``/``dur``. Track and process names come as ``M`` metadata events.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainsim.sim.engine import SimResult

_PIDS = {"stages": 1, "collectives": 2, "links": 3}


def _pid(span) -> int:
    if span.cat == "link":
        return _PIDS["links"]
    if "DP collectives" in span.track:
        return _PIDS["collectives"]
    return _PIDS["stages"]


def trace_events(result: SimResult) -> list[dict]:
    tids: dict[tuple[int, str], int] = {}
    events: list[dict] = []
    for name, pid in _PIDS.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for sp in sorted(result.spans, key=lambda s: (_pid(s), s.track, s.start_s)):
        pid = _pid(sp)
        key = (pid, sp.track)
        if key not in tids:
            tids[key] = tid = len(tids) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": sp.track}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        events.append({
            "ph": "X", "name": sp.name, "cat": sp.cat, "pid": pid, "tid": tids[key],
            "ts": sp.start_s * 1e6, "dur": max(0.0, sp.end_s - sp.start_s) * 1e6, "args": dict(sp.args),
        })
    return events


def write_chrome_trace(result: SimResult, path: str | Path) -> Path:
    """Write the trace; ``result`` must come from ``simulate(..., record=True)``."""
    path = Path(path)
    doc = {
        "traceEvents": trace_events(result),
        "displayTimeUnit": "ms",
        "otherData": {"iteration_s": result.iteration_s, "eq7_s": result.eq7_s, "mode": result.mode,
                      "seed": result.seed},
    }
    path.write_text(json.dumps(doc))
    return path
