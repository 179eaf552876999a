"""Shared links as a SimPy resource: transfers progress under max-min fair bandwidth shares.

A transfer (a P2P send, or a whole collective) is one flow with a *base* duration —
the calibrated or closed-form cost of running it alone — and a nominal rate on every
link it touches (``loads[link] * nbytes / base_s``). Alone it takes exactly ``base_s``.
When flows overlap on a link whose capacity their nominal rates exceed, each flow j
runs at a fraction ``x_j`` in (0, 1] of its nominal speed, chosen by max-min fairness
(progressive filling: raise every unfrozen flow's x together until a link saturates or
x reaches 1; freeze the flows on saturated links; repeat).

Shares change only when a flow starts, ends, or a capacity changes; then only the
flows of the affected connected component (flows linked through shared links) are
recomputed, and only those whose share changed get a new completion timeout (stale
timeouts are recognised by a version number and ignored). No packets, no ring steps.

A flow's nominal rate on a link is capped at the link's nominal capacity: the
calibrated duration is the truth for a transfer alone, and capacities only arbitrate
sharing. (A calibrated time faster than the link model allows would otherwise make a
lone transfer slower than its own measurement.)
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping
from operator import attrgetter
from typing import Any, Generic, TypeVar

import simpy

from trainsim.operators.errors import ConfigError

_EPS = 1e-12


#: What a link is keyed by: a :class:`topology.links.LinkId` in a run (any hashable, e.g. a string, in tests).
Link = TypeVar("Link", bound=Hashable)
#: One busy interval of a link: [start_s, end_s or None while busy, kind of the transfer that made it busy].
BusyInterval = list[Any]


class _Flow(Generic[Link]):
    """One transfer in flight (see module doc)."""

    __slots__ = ("rates", "remaining", "x", "last", "version", "done", "kind", "seq")

    def __init__(self, rates: dict[Link, float], base_s: float, done: simpy.Event, kind: str, now: float,
                 seq: int) -> None:
        self.seq = seq  # creation order: components are processed in it, so runs are reproducible
        self.rates = rates  # link -> bytes/s at full (nominal) speed
        self.remaining = base_s  # seconds of work left at full speed
        self.x = 0.0  # current fraction of nominal speed
        self.last = now  # when ``remaining`` was last brought up to date
        self.version = 0
        self.done = done
        self.kind = kind


_SEQ = attrgetter("seq")


class Network(Generic[Link]):
    """Links with capacities (bytes/s per direction) shared by concurrent transfers.

    ``record``: False, True (every link's busy intervals in :attr:`busy`) or the links to record.
    """

    def __init__(self, env: simpy.Environment, capacities: Mapping[Link, float],
                 record: bool | Collection[Link] = False) -> None:
        for link, c in capacities.items():
            if not c > 0:
                raise ConfigError("cluster", f"link {link} has capacity {c!r}; must be positive")
        self.env = env
        self.nominal = dict(capacities)
        self.capacity = dict(capacities)
        # Insertion-ordered dicts, not sets: iteration order must not depend on object ids.
        self._flows: dict[Link, dict[_Flow[Link], None]] = {link: {} for link in capacities}
        self.record = bool(record)
        # None: every link; a set: only those links (a bool ``record`` of False keeps self.record off).
        self._recorded: frozenset[Link] | None = (
            None if isinstance(record, bool) else frozenset(record))
        #: link -> list of [start_s, end_s, kind of the transfer that made it busy]
        self.busy: dict[Link, list[BusyInterval]] = {}
        self.transfers = 0
        self.recomputes = 0

    # -- public API -------------------------------------------------------------------------
    def transfer(self, base_s: float, loads: Mapping[Link, float], nbytes: float, kind: str) -> simpy.Event:
        """Start a transfer; the returned event fires when it completes."""
        if base_s <= 0:
            return self.transfer_rates(base_s, {}, kind)
        return self.transfer_rates(base_s, {e: w * nbytes / base_s for e, w in loads.items() if w > 0}, kind)

    def capped_rates(self, base_s: float, loads: Mapping[Link, float], nbytes: float) -> dict[Link, float]:
        """Nominal rates of one transfer, each capped at its link's nominal capacity (see module doc)."""
        if base_s <= 0:
            return {}
        nominal = self.nominal
        return {e: min(w * nbytes / base_s, nominal[e]) for e, w in loads.items() if w > 0}

    def transfer_rates(self, base_s: float, rates: Mapping[Link, float], kind: str) -> simpy.Event:
        """Start a transfer given its nominal rate per link (bytes/s at full speed).

        A ``dict`` of rates is kept, not copied (a run's routes are made once and never change):
        the caller must not change it while the transfer runs.
        """
        env = self.env
        done = env.event()
        if not base_s > 0 or not rates:
            # Nothing on any link: a plain delay of base_s (or an immediate completion).
            if base_s > 0:
                return env.timeout(base_s)
            done.succeed()
            return done
        self.transfers += 1
        flow: _Flow[Link] = _Flow(rates if type(rates) is dict else dict(rates), base_s, done, kind, env.now,
                                  self.transfers)
        flows = self._flows
        solo = True
        record, recorded = self.record, self._recorded
        for link in flow.rates:
            try:
                on = flows[link]
            except KeyError:
                raise ConfigError("cluster", f"transfer uses unknown link {link!r}") from None
            if on:
                solo = False
            elif record and (recorded is None or link in recorded):
                self.busy.setdefault(link, []).append([env.now, None, kind])
            on[flow] = None
        if solo:
            cap = self.capacity
            x = 1.0
            for link, r in flow.rates.items():
                if r > cap[link]:
                    x = min(x, cap[link] / r)
            self._arm(flow, x)
        else:
            self._recompute(self._component(flow.rates))
        return done

    def set_capacity(self, link: Link, bytes_per_s: float) -> None:
        """Change a link's capacity now (a congestion episode); shares are recomputed."""
        if link not in self.capacity:
            raise ConfigError("cluster", f"unknown link {link!r}")
        if not bytes_per_s > 0:
            raise ConfigError("simulation.jitter", f"capacity of {link} must stay positive, got {bytes_per_s!r}")
        self.capacity[link] = bytes_per_s
        if self._flows[link]:
            self._recompute(self._component((link,)))

    def active(self, link: Link) -> int:
        return len(self._flows[link])

    # -- internals ----------------------------------------------------------------------------
    def _arm(self, flow: _Flow[Link], x: float) -> None:
        flow.x = x
        flow.version += 1
        version = flow.version
        ev = self.env.timeout(flow.remaining / x)
        ev.callbacks.append(lambda _ev, f=flow, v=version: self._finish(f, v))  # type: ignore[misc]

    def _finish(self, flow: _Flow[Link], version: int) -> None:
        if version != flow.version:
            return  # a stale completion: the share changed since this timeout was armed
        now = self.env.now
        flows = self._flows
        neighbours = False
        record, recorded = self.record, self._recorded
        for link in flow.rates:
            on = flows[link]
            del on[flow]
            if on:
                neighbours = True
            elif record and (recorded is None or link in recorded):
                self.busy[link][-1][1] = now
        flow.remaining = 0.0
        flow.done.succeed()
        if neighbours:
            self._recompute(self._component(flow.rates))

    def _component(self, links: Iterable[Link]) -> list[_Flow[Link]]:
        """All flows connected to ``links`` through shared links, in creation order."""
        flows = self._flows
        stack = list(links)
        seen_links = set(stack)
        comp: set[_Flow[Link]] = set()
        while stack:
            for f in flows[stack.pop()]:
                if f not in comp:
                    comp.add(f)
                    for e in f.rates:
                        if e not in seen_links:
                            seen_links.add(e)
                            stack.append(e)
        return sorted(comp, key=_SEQ)

    def _recompute(self, comp: list[_Flow[Link]]) -> None:
        """Progressive filling over one component; re-arm flows whose share changed."""
        if not comp:
            return
        self.recomputes += 1
        now = self.env.now
        for f in comp:
            if f.x > 0:
                f.remaining -= (now - f.last) * f.x
                if f.remaining < 0:
                    f.remaining = 0.0
            f.last = now
        shares = max_min_shares({f: f.rates for f in comp}, self.capacity)
        for f in comp:
            x = shares[f]
            if x != f.x:
                self._arm(f, x)


Flow = TypeVar("Flow", bound=Hashable)


def max_min_shares(demands: Mapping[Flow, Mapping[Link, float]], capacity: Mapping[Link, float]) -> dict[Flow, float]:
    """Max-min fair fractions x_j in (0, 1] by progressive filling.

    ``demands[j][e]`` is flow j's rate on link e at full speed; the result keeps
    ``sum_j x_j * demands[j][e] <= capacity[e]`` on every link.
    """
    residual: dict[Link, float] = {}
    load: dict[Link, float] = {}  # summed nominal rate of the still-rising flows
    count: dict[Link, int] = {}  # how many still-rising flows use the link (exact, unlike ``load``)
    for rates in demands.values():
        for e, r in rates.items():
            if e not in residual:
                residual[e] = capacity[e]
                load[e] = 0.0
                count[e] = 0
            load[e] += r
            count[e] += 1
    active = list(demands)  # lists, not sets: float sums must not depend on hash order
    shares: dict[Flow, float] = {}
    level = 0.0
    while active:
        live = [e for e, n in count.items() if n > 0 and load[e] > 0]
        inc = 1.0 - level
        tight = None
        for e in live:
            t = residual[e] / load[e]
            if t < inc:
                inc, tight = t, e
        inc = max(inc, 0.0)
        level += inc
        for e in live:
            residual[e] -= inc * load[e]
        if tight is None:  # every rising flow reached its nominal speed
            for j in active:
                shares[j] = 1.0
            break
        saturated = {e for e in live if residual[e] <= _EPS * capacity[e]}
        saturated.add(tight)
        frozen = [j for j in active if not saturated.isdisjoint(demands[j])]
        for j in frozen:
            shares[j] = level
            for e, r in demands[j].items():
                load[e] -= r
                count[e] -= 1
        gone = set(map(id, frozen))
        active = [j for j in active if id(j) not in gone]
    return shares
