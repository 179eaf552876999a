"""Worker processes that inherit their work by fork (Linux): what the Monte Carlo and the sweep share.

A :class:`ForkedPool` registers a payload (the costs, the candidates, ...) under a pool number
before it forks its workers; a task then sends only ``(pool, fn, i)`` out, the worker runs
``fn(payload, i)`` on its inherited copy, and only the result comes back. Nothing is pickled but
the index and the result, and nothing is imported again. ``fn`` must be picklable by reference
(a module-level function, or a ``functools.partial`` of one).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

#: What forked workers read, per pool: the payload; an entry lives as long as its pool.
_PAYLOADS: dict[int, Any] = {}
_POOLS = itertools.count()


def can_fork() -> bool:
    """Fork workers: on Linux (fork is safe and the default there), not from a daemonic worker."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


def _init() -> None:
    """A forked worker's own stderr (the same file): the parent's stream object may have been mid-write
    on another thread (a progress heartbeat) at the fork, its lock held for good in this copy."""
    sys.stderr = open(os.dup(2), "w", buffering=1)  # lives as long as the worker


def _call(pool: int, fn: Callable[[Any, int], Any], i: int) -> Any:
    return fn(_PAYLOADS[pool], i)


class ForkedPool:
    """``jobs`` forked processes that inherit ``payload`` (see module doc)."""

    def __init__(self, payload: Any, jobs: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.pool = next(_POOLS)
        _PAYLOADS[self.pool] = payload  # before the fork: the workers inherit it
        self.jobs = jobs
        self.ex = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                                      initializer=_init)

    def map(self, fn: Callable[[Any, int], Any], idx: Sequence[int], chunksize: int = 1) -> Iterator[Any]:
        """``fn(payload, i)`` for every ``i`` of ``idx``, results in that order."""
        return self.ex.map(_call, [self.pool] * len(idx), [fn] * len(idx), idx, chunksize=chunksize)

    def submit(self, fn: Callable[[Any, int], Any], i: int) -> Future[Any]:
        return self.ex.submit(_call, self.pool, fn, i)

    def close(self) -> None:
        self.ex.shutdown(wait=True, cancel_futures=True)
        _PAYLOADS.pop(self.pool, None)
