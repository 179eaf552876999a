"""Per-run random streams: independent child generators derived from a run's seed.

A :class:`RunStreams` is made once per simulation run (by the perturbation's ``bind``, see
:mod:`sim.perturb`) and lives as long as the run: no state is kept between runs or at module
level, so any number of runs may be interleaved, or run on several threads.

A child stream is keyed by a tuple of plain values (strings and ints); its seed is the run
generator's seed sequence extended by ``crc32(repr(key))``, so the same key of the same seed
always gives the same numbers, in any process, whatever else the run draws. The run's own
generator is never drawn from (unless it was built without a seed sequence; then four words
of it seed the children).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np

#: A stream's key: a tuple of str and int (its repr must not depend on the process).
StreamKey = tuple[object, ...]


class NormalStream:
    """Standard normals from one generator, drawn in blocks (a scalar draw costs ~1 us of overhead).

    ``normal()`` is the ``__next__`` of a generator walking the blocks: one C-level call per draw.
    """

    __slots__ = ("g", "normal")
    BLOCK = 256

    def __init__(self, g: np.random.Generator) -> None:
        self.g = g
        self.normal: Callable[[], float] = _blocks(g, self.BLOCK).__next__


def _blocks(g: np.random.Generator, block: int) -> Iterator[float]:
    """``g``'s standard normals, ``block`` at a time (the next block drawn when one is used up)."""
    while True:
        yield from g.standard_normal(block).tolist()


class RunStreams:
    """The child streams of one run's generator (see module doc)."""

    __slots__ = ("entropy", "spawn_key", "streams")

    def __init__(self, rng: np.random.Generator) -> None:
        bg = rng.bit_generator
        ss = getattr(bg, "seed_seq", None) or getattr(bg, "_seed_seq", None)
        if not isinstance(ss, np.random.SeedSequence):  # a generator built without a seed sequence
            ss = np.random.SeedSequence(bg.random_raw(4).tolist())
        self.entropy = ss.entropy
        self.spawn_key = tuple(ss.spawn_key)
        self.streams: dict[StreamKey, NormalStream] = {}

    def child(self, key: StreamKey) -> np.random.Generator:
        """A fresh generator for ``key`` (the same numbers every time for the same key and seed)."""
        # A fixed word per key: crc32 of its repr (stable across processes, unlike hash()).
        word = zlib.crc32(repr(key).encode())
        seq = np.random.SeedSequence(self.entropy, spawn_key=(*self.spawn_key, 0x717, word))
        return np.random.Generator(np.random.PCG64(seq))

    def stream(self, key: StreamKey) -> NormalStream:
        """The run's normal stream for ``key``, made on first use."""
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = NormalStream(self.child(key))
        return s
