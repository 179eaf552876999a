"""What a recorded run keeps: spans on tracks, stored column-wise, for a chosen set of stage replicas.

A :class:`Span` is one interval of one track (a stage replica's timeline, a stage's DP
collectives, a link). A run stores them in a :class:`SpanLog`: one array per field and the
track and span names interned, about 35 bytes a span instead of a few hundred for a span
object with its own ``args`` dict, so recording every replica of a 16,384-GPU run stays in the
tens of MiB. The log is a ``Sequence[Span]``: indexing or iterating makes the span objects.

A :class:`Recorder` decides what is kept: every track (``record=True``), or only the tracks of
some stage replicas, their stages' DP-collective tracks and the links their own transfers use
(``record={(stage, replica), ...}``; see :func:`sim.engine.simulate`).
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from trainsim.operators.errors import ConfigError

#: Span categories (``Span.cat``), in the order their codes are stored.
CATS = ("forward", "backward", "recompute", "mp", "pp", "pp_wait", "dp_allreduce", "optimizer", "dp_allgather",
        "update", "link", "host", "cp")
_CAT_CODE = {c: i for i, c in enumerate(CATS)}


@dataclass(frozen=True)
class Span:
    track: str
    name: str
    cat: str  # one of CATS
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)


def replica_track(stage: int, replica: int) -> str:
    return f"stage {stage} replica {replica}"


def collectives_track(stage: int) -> str:
    return f"stage {stage} DP collectives"


class SpanLog(Sequence[Span]):
    """Spans stored column-wise (see module doc); equal to another log with the same spans."""

    __slots__ = ("_tracks", "_track_ids", "_names", "_name_ids", "_track", "_name", "_cat", "_start", "_end",
                 "_micro", "_chunk")

    def __init__(self) -> None:
        self._tracks: list[str] = []
        self._track_ids: dict[str, int] = {}
        self._names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self._track = array("I")
        self._name = array("I")
        self._cat = array("B")
        self._start = array("d")
        self._end = array("d")
        self._micro = array("i")  # -1: the span has no args
        self._chunk = array("i")

    def track_id(self, track: str) -> int:
        """The code of a track name (interned on first use)."""
        i = self._track_ids.get(track)
        if i is None:
            i = self._track_ids[track] = len(self._tracks)
            self._tracks.append(track)
        return i

    def add(self, track: int, name: str, cat: str, start_s: float, end_s: float, micro: int = -1,
            chunk: int = -1) -> None:
        """Append one span; ``track`` is a :meth:`track_id`; ``micro >= 0`` gives it args (micro, chunk)."""
        i = self._name_ids.get(name)
        if i is None:
            i = self._name_ids[name] = len(self._names)
            self._names.append(name)
        self._track.append(track)
        self._name.append(i)
        self._cat.append(_CAT_CODE[cat])
        self._start.append(start_s)
        self._end.append(end_s)
        self._micro.append(micro)
        self._chunk.append(chunk)

    def track_codes_used(self) -> set[int]:
        """Codes of the tracks that have at least one span."""
        return set(self._track)

    def nbytes(self) -> int:
        """Bytes held by the columns (not counting the interned names)."""
        return sum(a.itemsize * len(a) for a in (self._track, self._name, self._cat, self._start, self._end,
                                                  self._micro, self._chunk))

    def _span(self, i: int) -> Span:
        micro = self._micro[i]
        args = {"micro": micro, "chunk": self._chunk[i]} if micro >= 0 else {}
        return Span(self._tracks[self._track[i]], self._names[self._name[i]], CATS[self._cat[i]], self._start[i],
                    self._end[i], args)

    def __len__(self) -> int:
        return len(self._start)

    @overload
    def __getitem__(self, i: int) -> Span: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Span, ...]: ...

    def __getitem__(self, i: int | slice) -> Span | tuple[Span, ...]:
        if isinstance(i, slice):
            return tuple(self._span(k) for k in range(*i.indices(len(self))))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("span index out of range")
        return self._span(i)

    def __iter__(self) -> Iterator[Span]:
        for i in range(len(self)):
            yield self._span(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):  # another log, or a sequence of spans
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpanLog({len(self)} spans on {len(set(self._track))} tracks)"


class Recorder:
    """Records the spans of the chosen stage replicas (all when ``replicas`` is None) into :attr:`log`."""

    __slots__ = ("log", "replicas", "stages", "_replica_codes")

    def __init__(self, replicas: frozenset[tuple[int, int]] | None) -> None:
        self.log = SpanLog()
        self.replicas = replicas
        self.stages = None if replicas is None else frozenset(s for s, _ in replicas)
        self._replica_codes: set[int] = set()

    def replica(self, stage: int, replica: int) -> int | None:
        """The track code of a stage replica's timeline, or None when it is not recorded."""
        if self.replicas is not None and (stage, replica) not in self.replicas:
            return None
        code = self.log.track_id(replica_track(stage, replica))
        self._replica_codes.add(code)
        return code

    def collectives(self, stage: int) -> int | None:
        """The track code of a stage's DP collectives, or None when none of its replicas is recorded."""
        if self.stages is not None and stage not in self.stages:
            return None
        return self.log.track_id(collectives_track(stage))

    def span(self, track: int, name: str, cat: str, start_s: float, end_s: float, micro: int = -1,
             chunk: int = -1) -> None:
        """Record a span that has a duration (empty ones are left out)."""
        if end_s > start_s:
            self.log.add(track, name, cat, start_s, end_s, micro, chunk)

    def replicas_recorded(self) -> int:
        """How many stage replicas have spans."""
        return len(self._replica_codes & self.log.track_codes_used())


def recorder_for(record: bool | Collection[tuple[int, int]], pp: int, dp: int) -> Recorder | None:
    """The recorder a ``simulate(record=...)`` argument asks for (None: record nothing)."""
    if record is False or record is None:
        return None
    if record is True:
        return Recorder(None)
    try:
        chosen = frozenset((int(s), int(r)) for s, r in record)
    except (TypeError, ValueError):
        raise ConfigError("record", f"expected True, False or (stage, replica) pairs, got {record!r}") from None
    bad = sorted((s, r) for s, r in chosen if not (0 <= s < pp and 0 <= r < dp))
    if bad:
        raise ConfigError("record", f"stage replicas {bad[:4]} outside pp={pp}, dp={dp}")
    return Recorder(chosen)
