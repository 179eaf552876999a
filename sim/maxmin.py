"""Max-min fair shares by progressive filling: the arithmetic :mod:`sim.network` re-shares with.

Raise every still-rising flow's fraction x together until a link saturates or x reaches 1;
freeze the flows on saturated links; repeat. The network calls :func:`fill` with only the
over-subscribed links of a component (a link whose flows' nominal rates fit its capacity can
never saturate below x = 1, so leaving it out changes nothing but the work), and with one
representative for links that carry the same flows at the same rates and capacity (their
constraints are the same inequality). The arithmetic is done in the order the model always
did it, so shares come out to the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

#: A link within this relative distance of full is saturated by the same step (rounding of residuals).
EPS = 1e-12

Link = TypeVar("Link", bound=Hashable)
Flow = TypeVar("Flow", bound=Hashable)


def fill(demands: Sequence[Sequence[tuple[Link, float]]], capacity: Callable[[Link], float]) -> list[float]:
    """Max-min fair fractions x_j in (0, 1] of flows given as ``(link, nominal rate)`` pairs.

    The result keeps ``sum_j x_j * rate_j(e) <= capacity(e)`` on every link named. Lists and
    insertion-ordered dicts only: every float sum runs in the order of ``demands``, so the result
    does not depend on hashing.
    """
    residual: dict[Link, float] = {}
    load: dict[Link, float] = {}  # summed nominal rate of the still-rising flows
    count: dict[Link, int] = {}  # how many still-rising flows use the link (exact, unlike ``load``)
    for pairs in demands:
        for e, r in pairs:
            if e in residual:
                load[e] += r
                count[e] += 1
            else:
                residual[e] = capacity(e)
                load[e] = r
                count[e] = 1
    shares = [1.0] * len(demands)
    active = list(range(len(demands)))
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
        if tight is None:  # every rising flow reached its nominal speed (shares start at 1.0)
            break
        saturated = {e for e in live if residual[e] <= EPS * capacity(e)}  # membership only, never iterated
        saturated.add(tight)
        rising = []
        for j in active:
            pairs = demands[j]
            if any(e in saturated for e, _ in pairs):
                shares[j] = level
                for e, r in pairs:
                    load[e] -= r
                    count[e] -= 1
            else:
                rising.append(j)
        active = rising
    return shares


def max_min_shares(demands: Mapping[Flow, Mapping[Link, float]], capacity: Mapping[Link, float]) -> dict[Flow, float]:
    """Max-min fair fractions by flow: ``demands[j][e]`` is flow j's rate on link e at full speed."""
    flows = list(demands)
    return dict(zip(flows, fill([list(demands[j].items()) for j in flows], capacity.__getitem__), strict=True))
