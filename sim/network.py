"""Shared links as a SimPy resource: transfers progress under max-min fair bandwidth shares.

A transfer (a P2P send, or a whole collective) is one flow with a *base* duration —
the calibrated or closed-form cost of running it alone — and a nominal rate on every
link it touches (``loads[link] * nbytes / base_s``). Alone it takes exactly ``base_s``.
When flows overlap on a link whose capacity their nominal rates exceed, each flow j
runs at a fraction ``x_j`` in (0, 1] of its nominal speed, chosen by max-min fairness
(progressive filling, :mod:`sim.maxmin`).

What a change costs is what the contention is. A link is *hot* (over-subscribed) when its
flows' nominal rates exceed its capacity; a cold link cannot saturate below x = 1, so the shares
are those of each *hot component* (flows connected through hot links) alone, and a flow on cold
links only runs at x = 1. A transfer that makes none of its links hot starts at full speed and
touches nobody; a start, end or capacity change on a hot link re-shares the flows on it and their
hot components, and re-arms only the flows whose share changed. Links that every route so far
uses alike (same rate, same capacity: a node's NVLink ports under its MP all-reduce, its NICs
under P2P and DP traffic) are one inequality and share one :class:`_Bundle`, so a transfer updates
a few bundles, not every link. A route is interned on first use, by the identity of its rates
dict (kept, never copied); a bundle splits, never merges, when a new route or a capacity change
tells its links apart.

SimPy cannot cancel a scheduled event: a completion timeout superseded by a share change stays
in its queue, with its callback taken off, and does no work when it comes up.

A flow's nominal rate on a link is capped at the link's nominal capacity: the
calibrated duration is the truth for a transfer alone, and capacities only arbitrate
sharing. (A calibrated time faster than the link model allows would otherwise make a
lone transfer slower than its own measurement.)

Reproducibility: flows and bundles live in insertion-ordered dicts and lists, and a re-shared set
is processed in creation order, so every float sum and every timeout's place in SimPy's queue is
the same from run to run; sets are used for membership only.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from operator import attrgetter
from typing import Any, Generic, TypeVar, cast

import simpy

from trainsim.operators.errors import ConfigError
from trainsim.sim.maxmin import fill, max_min_shares

__all__ = ["BusyInterval", "Link", "Network", "max_min_shares"]

#: What a link is keyed by: a :class:`topology.links.LinkId` in a run (any hashable, e.g. a string, in tests).
Link = TypeVar("Link", bound=Hashable)
#: One busy interval of a link: [start_s, end_s or None while busy, kind of the transfer that made it busy].
BusyInterval = list[Any]
#: Interned routes kept before those without a flow in flight are dropped (callers that make a new
#: rates dict per transfer, such as :meth:`Network.transfer`, would otherwise grow the table).
ROUTE_TABLE_LIMIT = 1 << 16


class _Bundle(Generic[Link]):
    """Links used alike by every route so far: one capacity, one load, one set of flows."""

    __slots__ = ("links", "cap", "load", "flows", "children")

    def __init__(self, links: list[Link], cap: float, load: float, flows: dict[_Flow[Link], float]) -> None:
        self.links = links
        self.cap = cap  # bytes/s of each of its links
        self.load = load  # summed nominal rate of its flows, on each of its links (== sum(flows.values()))
        self.flows = flows  # flow -> its nominal rate here, in arrival order
        self.children: list[_Bundle[Link]] | None = None  # what it was split into


class _Route(Generic[Link]):
    """A rates dict made into (bundle, rate) parts; re-resolved when bundles have split since."""

    __slots__ = ("rates", "parts", "epoch", "users")

    def __init__(self, rates: dict[Link, float], parts: list[tuple[_Bundle[Link], float]], epoch: int) -> None:
        self.rates = rates
        self.parts = parts
        self.epoch = epoch
        self.users = 0  # flows in flight


class _Flow(Generic[Link]):
    """One transfer in flight (see module doc)."""

    __slots__ = ("route", "remaining", "x", "last", "timer", "done", "seq")

    def __init__(self, route: _Route[Link], base_s: float, done: simpy.Event | None, now: float, seq: int) -> None:
        self.seq = seq  # creation order: re-shared flows are processed in it, so runs are reproducible
        self.route = route
        self.remaining = base_s  # seconds of work left at full speed, as of ``last``
        self.x = 0.0  # current fraction of nominal speed
        self.last = now
        self.timer: simpy.Timeout | None = None  # the pending completion timeout
        self.done = done  # None: the caller waits on the timer itself (see Network.transfer_rates)


_SEQ = attrgetter("seq")
_CAP = attrgetter("cap")


class Network(Generic[Link]):
    """Links with capacities (bytes/s per direction) shared by concurrent transfers.

    ``record``: False, True (every link's busy intervals in :attr:`busy`) or the links to record.
    Counters: :attr:`transfers` started, :attr:`recomputes` (re-shares run), :attr:`reshared`
    (flows looked at by them), :attr:`superseded` (completion timeouts made stale by a share change).
    """

    def __init__(self, env: simpy.Environment, capacities: Mapping[Link, float],
                 record: bool | Collection[Link] = False) -> None:
        for link, c in capacities.items():
            if not c > 0:
                raise ConfigError("cluster", f"link {link} has capacity {c!r}; must be positive")
        self.env = env
        self.nominal = dict(capacities)
        self.capacity = dict(capacities)
        # A link's bundle; None until a route uses it (fresh links are bundled by that route).
        self._bundle: dict[Link, _Bundle[Link] | None] = dict.fromkeys(capacities)
        self._routes: dict[int, _Route[Link]] = {}  # id(rates dict) -> route; the route keeps the dict alive
        self._epoch = 0  # bumped by every split: routes resolved before it look their bundles up again
        self.record = bool(record)
        # None: every link; a set: only those links (a bool ``record`` of False keeps self.record off).
        self._recorded: frozenset[Link] | None = (
            None if isinstance(record, bool) else frozenset(record))
        #: link -> list of [start_s, end_s, kind of the transfer that made it busy]
        self.busy: dict[Link, list[BusyInterval]] = {}
        self.transfers = 0
        self.recomputes = 0
        self.reshared = 0
        self.superseded = 0
        self._on_timer_cb = self._on_timer  # one bound method for every timeout

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

    def transfer_rates(self, base_s: float, rates: Mapping[Link, float], kind: str, *,
                       sole_waiter: bool = False) -> simpy.Event:
        """Start a transfer given its nominal rate per link (bytes/s at full speed).

        A ``dict`` of rates is kept and recognised by identity (a run's routes are made once and
        never change): the caller must not change it after passing it; pass a new dict instead.

        ``sole_waiter``: the caller yields the returned event at once and nothing else waits on it
        (a SimPy process, not a condition). The completion is then the flow's own timeout, one
        event fewer per transfer; when a share change re-arms it, its waiter moves to the new one.
        """
        env = self.env
        if not base_s > 0 or not rates:
            # Nothing on any link: a plain delay of base_s (or an immediate completion).
            if base_s > 0:
                return env.timeout(base_s)
            done = env.event()
            done.succeed()
            return done
        route = self._routes.get(id(rates))
        if route is None:
            route = self._intern(rates if type(rates) is dict else dict(rates))
        parts = route.parts if route.epoch == self._epoch else self._resolve(route)
        self.transfers += 1
        route.users += 1
        flow: _Flow[Link] = _Flow(route, base_s, None if sole_waiter else env.event(), env.now, self.transfers)
        hot: list[_Bundle[Link]] = []
        woke: list[_Bundle[Link]] = []
        shared = False  # a hot bundle other flows are on too: they must be re-shared with this one
        for b, r in parts:
            on = b.flows
            if on:
                b.load = total = b.load + r
            else:
                b.load = total = r
                woke.append(b)
            if total > b.cap:
                hot.append(b)
                shared = shared or bool(on)
            on[flow] = r
        if woke and self.record:
            self._record(route, woke, kind)
        if shared:
            self._reshare(hot)
            timer = flow.timer
        else:
            # Nobody else touched: full speed, or alone on every hot bundle (a lone transfer through a
            # congested link), where _reshare's one-route case gives the tightest bundle's
            # capacity over load, computed here the same way. _arm of a new flow, inlined.
            flow.x = x = min([b.cap / b.load for b in hot]) if hot else 1.0
            timer = flow.timer = env.timeout(base_s / x, flow)
            timer.callbacks.append(self._on_timer_cb)
        return flow.done if flow.done is not None else timer  # type: ignore[return-value]  # armed above

    def set_capacity(self, link: Link, bytes_per_s: float) -> None:
        """Change a link's capacity now (a congestion episode); shares are recomputed if it was or
        becomes over-subscribed."""
        self.set_capacities({link: bytes_per_s})

    def set_capacities(self, changes: Mapping[Link, float]) -> None:
        """Change several links' capacities at one instant (a congestion episode over a whole tier).

        A bundle splits only where its links end up with different capacities, so links that change
        together stay one bundle (one link at a time would leave every link a bundle of its own and
        every transfer touching each of them); the flows on bundles that were or become
        over-subscribed are re-shared once, after every change."""
        for link, c in changes.items():
            if link not in self.capacity:
                raise ConfigError("cluster", f"unknown link {link!r}")
            if not c > 0:
                raise ConfigError("simulation.jitter", f"capacity of {link} must stay positive, got {c!r}")
        # bundles with a changed link, in the order first met (a dict: a tier-wide episode changes
        # thousands of links at once, and a list's membership test made that quadratic)
        touched: dict[_Bundle[Link], None] = {}
        for link, c in changes.items():
            self.capacity[link] = c
            b = self._bundle[link]
            if b is not None:
                touched[b] = None
        hot: list[_Bundle[Link]] = []
        for b in touched:
            # its links by new capacity (None: unchanged), in the bundle's link order
            groups: dict[float | None, list[Link]] = {}
            for e in b.links:
                groups.setdefault(changes.get(e), []).append(e)
            if len(groups) > 1:  # its links no longer have one capacity
                rest = groups.pop(None, None)
                self._split(b, list(groups.values()) + ([rest] if rest else []))
            for new_cap, links in groups.items():
                if new_cap is None:
                    continue
                piece = cast("_Bundle[Link]", self._bundle[links[0]])
                was_hot = piece.load > piece.cap
                piece.cap = new_cap
                if piece.flows and (was_hot or piece.load > new_cap):
                    hot.append(piece)
        if hot:
            self._reshare(hot)

    def active(self, link: Link) -> int:
        b = self._bundle[link]
        return len(b.flows) if b is not None else 0

    def alike(self, a: Link, b: Link) -> bool:
        """Whether links ``a`` and ``b`` are one bundle (one inequality of the shares) now."""
        return self._bundle[a] is not None and self._bundle[a] is self._bundle[b]

    # -- routes and bundles -------------------------------------------------------------------
    def _intern(self, rates: dict[Link, float]) -> _Route[Link]:
        """Make ``rates`` a route: bundle its fresh links by (rate, capacity), split the bundles it
        uses only in part or at several rates, and keep it by the dict's identity."""
        bundle, cap = self._bundle, self.capacity
        groups: dict[tuple[Any, float], list[Link]] = {}  # (bundle, or capacity of fresh links, rate)
        for e, r in rates.items():
            if e not in bundle:
                raise ConfigError("cluster", f"transfer uses unknown link {e!r}")
            b = bundle[e]
            groups.setdefault((cap[e] if b is None else b, r), []).append(e)
        pieces: dict[_Bundle[Link], list[list[Link]]] = {}
        for (key, _r), links in groups.items():
            if isinstance(key, _Bundle):
                pieces.setdefault(key, []).append(links)
            else:
                fresh: _Bundle[Link] = _Bundle(links, key, 0.0, {})
                for e in links:
                    bundle[e] = fresh
        for b, used in pieces.items():
            if len(used) > 1 or len(used[0]) < len(b.links):
                rest = [e for e in b.links if e not in rates]
                self._split(b, used + [rest] if rest else used)
        parts = [(cast("_Bundle[Link]", bundle[links[0]]), r) for (_k, r), links in groups.items()]
        if len(self._routes) >= ROUTE_TABLE_LIMIT:
            self._routes = {k: v for k, v in self._routes.items() if v.users}
        route = self._routes[id(rates)] = _Route(rates, parts, self._epoch)
        return route

    def _split(self, b: _Bundle[Link], pieces: list[list[Link]]) -> None:
        """Replace ``b`` by one bundle per piece (a partition of its links), each with its state."""
        b.children = []
        for links in pieces:
            child: _Bundle[Link] = _Bundle(links, b.cap, b.load, dict(b.flows))
            b.children.append(child)
            for e in links:
                self._bundle[e] = child
        self._epoch += 1

    def _resolve(self, route: _Route[Link]) -> list[tuple[_Bundle[Link], float]]:
        """The route's parts in the current bundles (a split bundle stands for all its pieces)."""
        parts: list[tuple[_Bundle[Link], float]] = []
        stack = [(b, r) for b, r in reversed(route.parts)]
        while stack:
            b, r = stack.pop()
            if b.children is None:
                parts.append((b, r))
            else:
                stack.extend((c, r) for c in reversed(b.children))
        route.parts, route.epoch = parts, self._epoch
        return parts

    def _record(self, route: _Route[Link], bundles: list[_Bundle[Link]], kind: str | None) -> None:
        """Open (``kind`` given) or close the busy intervals of the recorded links of ``bundles``,
        which just became busy or idle, in the route's link order."""
        now, recorded, which = self.env.now, self._recorded, set(bundles)
        for e in route.rates:
            if self._bundle[e] in which and (recorded is None or e in recorded):
                if kind is None:
                    self.busy[e][-1][1] = now
                else:
                    self.busy.setdefault(e, []).append([now, None, kind])

    # -- shares ---------------------------------------------------------------------------------
    def _arm(self, flow: _Flow[Link], x: float) -> None:
        """Give ``flow`` the share ``x`` from now: bring its work up to date and (re)arm its timeout."""
        now = self.env.now
        if flow.x > 0:
            flow.remaining -= (now - flow.last) * flow.x
            if flow.remaining < 0:
                flow.remaining = 0.0
        flow.last = now
        flow.x = x
        old = flow.timer
        timer = flow.timer = self.env.timeout(flow.remaining / x, flow)
        if old is not None:
            self.superseded += 1
            if flow.done is None:  # its waiter is on the timer: ours first, then the waiter, move over
                timer.callbacks, old.callbacks = old.callbacks, []
                return
            old.callbacks = []  # defused: it comes up and does nothing
        timer.callbacks.append(self._on_timer_cb)

    def _on_timer(self, ev: simpy.Event) -> None:
        """A flow's completion: take it off its bundles and re-share where it was over-subscribing."""
        flow = cast("_Flow[Link]", ev.value)  # the timeout's value (see _arm)
        route = flow.route
        parts = route.parts if route.epoch == self._epoch else self._resolve(route)
        route.users -= 1
        hot: list[_Bundle[Link]] = []
        idle: list[_Bundle[Link]] = []
        for b, _r in parts:
            on = b.flows
            del on[flow]
            if on:
                if b.load > b.cap:  # it was over-subscribed: the flows left on it may speed up
                    hot.append(b)
                b.load = sum(on.values(), 0.0)  # exactly, in arrival order: no drift
            else:  # the flow was alone here: nobody to re-share
                b.load = 0.0
                idle.append(b)
        if idle and self.record:
            self._record(route, idle, None)
        flow.remaining = 0.0
        flow.timer = None
        if flow.done is not None:  # else the waiter on the timer resumes right after this callback
            flow.done.succeed()
        if hot:
            self._reshare(hot)

    def _reshare(self, seeds: list[_Bundle[Link]]) -> None:
        """Re-share the flows on ``seeds`` (distinct bundles) and every flow connected to them
        through hot bundles."""
        epoch = self._epoch
        stack = list(seeds)
        seen = set(stack)  # membership only
        n_hot = sum(b.load > b.cap for b in stack)  # hot bundles in the component
        n_pairs = 0  # hot (bundle, rate) parts of its flows
        # A seed may have cooled (a flow left it): its flows are re-shared all the same.
        comp: dict[_Flow[Link], list[tuple[_Bundle[Link], float]]] = {}  # flow -> its hot parts
        while stack:
            for f in stack.pop().flows:
                if f not in comp:
                    comp[f] = pairs = []
                    route = f.route
                    for b, r in route.parts if route.epoch == epoch else self._resolve(route):
                        if b.load > b.cap:
                            pairs.append((b, r))
                            if b not in seen:
                                seen.add(b)
                                stack.append(b)
                                n_hot += 1
                    n_pairs += len(pairs)
        if not comp:
            return
        self.recomputes += 1
        self.reshared += len(comp)
        ordered = sorted(comp, key=_SEQ) if len(comp) > 1 else list(comp)
        if n_pairs == n_hot * len(ordered):
            # Every flow is on every hot bundle (a route's parts are distinct bundles), the usual
            # case: one or two flows on one route's links. Progressive filling would freeze them all
            # at its first step, at the tightest bundle's capacity over load: the same division of
            # the same sums (a bundle's load is summed in creation order, as fill sums it), so the
            # same bits. No hot bundle: all run at full speed.
            first = comp[ordered[0]]
            x = min([b.cap / b.load for b, _ in first]) if first else 1.0
            for f in ordered:
                if x != f.x:
                    self._arm(f, x)
            return
        for f, x in zip(ordered, fill([comp[f] for f in ordered], _CAP), strict=True):
            if x != f.x:
                self._arm(f, x)
