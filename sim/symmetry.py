"""Replica symmetry: simulate one data-parallel replica per stage when the others cannot differ.

Without jitter every replica of a stage walks the same schedule with the same costs. Its
transfers differ from another replica's only in the links they use, so when those links are
*isomorphic* the replicas' timelines are identical and one representative (replica 0) can stand
for all of them. The guard, :func:`plan`, proves this for a run or declines:

* no perturbation (jitter, stragglers, congestion episodes: anything per replica or per link);
* no recording of the whole run, and no recorded replica other than the representative (a trace
  of the critical replica records replica 0 of each stage, the one the ties go to);
* without contention (the ideal mode, or links off): nothing else tells replicas apart;
* with contention, the routes (:mod:`sim.routes`) must be symmetric:

  - each replica's own routes (its MP and CP routes, the P2P routes of its stage boundaries) use
    links of its own: no link is on the own routes of two replicas;
  - replica r's own routes are replica 0's under one link bijection ``phi_r`` (position by
    position, the routes' insertion order), with the same rate on each image link, the same
    capacity and tier;
  - every DP collective (a flow over all replicas' links) has on replica r's own links exactly
    ``phi_r`` of its rates on replica 0's; its links outside every replica's own routes carry
    only DP collectives, the same in the full and the reduced run.

  Then, by induction over events, the flows of replica r see the same shares as replica 0's at
  every instant, and a DP collective's share is bounded alike by every replica's copy of its
  links: simulating replica 0 alone gives the same share to every flow. Links shared by replicas
  (several GPUs behind one NIC) would need a representative flow to count ``m`` times, and
  ``m * rate`` is not ``rate + ... + rate`` to the bit: such layouts run in full.

A fat-tree fabric (:mod:`topology.fabric`) needs nothing new: its leaf and spine uplinks are links
like the others. An uplink that only DP collectives cross (no replica's own route: e.g. PP1 with
MP inside a node) is a link outside every replica's own routes, loaded alike in both runs, so the
reduction holds. An uplink on the own routes of two replicas (the P2P sends of the replicas under
one leaf, a CP or MP ring across leaves) is a shared link, and the guard declines: the run is
simulated in full, as it is for a shared NIC.

:func:`reduce` makes a run of the representatives from an elaborated :class:`sim.build.Build`:
``dp`` of 1, barriers and DP rendezvous that wait for one replica per stage, and the tally of
replica 0 standing (the same object) for every replica of its stage, so that what
:func:`sim.engine.collect` sums over all replicas (the bubble share) is summed over equal values
in the same order. :func:`expand` gives back the run's full ``dp`` for :func:`sim.engine.collect`.
The reduced run processes fewer SimPy events (:attr:`SimResult.events` is the count it ran).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from trainsim.sim.build import Barrier, Build, StageSync, Tally
from trainsim.sim.routes import Rates, Routes

__all__ = ["Plan", "expand", "isomorphic_replicas", "plan", "reduce"]

#: A link id (a :class:`topology.links.LinkId` in a run; any hashable in tests).
L = TypeVar("L", bound=Hashable)


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided: the simulated replicas of each stage and what each stands for."""

    dp: int  # the run's replicas per stage
    representatives: tuple[int, ...]  # simulated replicas (of every stage)
    multiplicity: dict[int, int]  # representative -> replicas it stands for (itself included)


def _own_routes(routes: Routes, dp: int) -> list[list[Rates]]:
    """Every replica's own routes, each list in an order that is the same for every replica: its
    stages' MP and CP routes in stage order, then its P2P routes in the table's order. One pass over
    the P2P table for all replicas (a pass per replica was dp^2 (pp - 1) work: 1.3 s at dp 1024)."""
    pp = routes.placement.par.pp
    out: list[list[Rates]] = []
    for r in range(dp):
        own: list[Rates] = []
        for s in range(pp):
            if (s, r) in routes.mp:
                own.append(routes.mp[s, r])
            if (s, r) in routes.cp:
                own.append(routes.cp[s, r])
        out.append(own)
    for key, rates in routes.p2p.items():
        if 0 <= key[2] < dp:
            out[key[2]].append(rates)
    return out


def isomorphic_replicas(own: Sequence[Sequence[Mapping[L, float]]], shared: Iterable[Mapping[L, float]],
                        capacity: Mapping[L, float], tier: Mapping[L, object] | None = None) -> bool:
    """Whether replicas whose own routes are ``own[r]`` (lists of link -> rate, in one order for every
    replica) are isomorphic to replica 0, with ``shared`` routes (flows over several replicas'
    links, e.g. DP collectives) symmetric under the same link bijections (see module doc).

    Exact comparisons only: a rate or a capacity that differs in the last bit breaks the symmetry.
    """
    if not own:
        return True
    owner: dict[L, int] = {}
    for r, routes in enumerate(own):
        for rates in routes:
            for e in rates:
                if owner.setdefault(e, r) != r:
                    return False  # a link on two replicas' own routes
    base = own[0]
    maps: list[dict[L, L]] = [{}]
    for r in range(1, len(own)):
        mine = own[r]
        if len(mine) != len(base):
            return False
        phi: dict[L, L] = {}
        image: set[L] = set()  # membership only
        for a, b in zip(base, mine, strict=True):
            if len(a) != len(b):
                return False
            for (e0, r0), (e1, r1) in zip(a.items(), b.items(), strict=True):
                if r0 != r1 or capacity[e0] != capacity[e1]:
                    return False
                if tier is not None and tier[e0] != tier[e1]:
                    return False
                mapped = phi.get(e0)
                if mapped is None:
                    if e1 in image:
                        return False  # not injective
                    phi[e0] = e1
                    image.add(e1)
                elif mapped != e1:
                    return False  # not a function
        maps.append(phi)
    for rates in shared:
        on0 = {e: w for e, w in rates.items() if owner.get(e) == 0}
        per: list[dict[L, float]] = [{} for _ in own]
        for e, w in rates.items():
            o = owner.get(e)
            if o is not None:
                per[o][e] = w
        for r in range(1, len(own)):
            phi = maps[r]
            if len(per[r]) != len(on0):
                return False
            for e0, w in on0.items():
                if per[r].get(phi[e0]) != w:
                    return False
    return True


def plan(ctx: Build) -> Plan | None:
    """The representatives of a run whose replicas provably cannot differ; None: simulate in full."""
    dp = ctx.dp
    if dp <= 1 or ctx.perturb is not None:
        return None
    rec = ctx.recorder
    if rec is not None and (rec.replicas is None or any(r != 0 for _s, r in rec.replicas)):
        return None
    routes = ctx.routes
    if routes is not None:
        own = _own_routes(routes, dp)
        shared = [*routes.dp_ar.values(), *routes.dp_ag.values()]
        tiers = {e: e.tier for routes_r in own for rates in routes_r for e in rates}
        if not isomorphic_replicas(own, shared, routes.capacities, tiers):
            return None
    elif ctx.opts.contention:
        return None  # links asked for but none built: not a layout this guard knows
    return Plan(dp=dp, representatives=(0,), multiplicity={0: dp})


def reduce(ctx: Build, p: Plan | None = None) -> Build:
    """The run of the representatives only (see module doc); ``ctx`` itself when :func:`plan` declines.

    Call it on a freshly elaborated build, before :func:`sim.engine.run`; after the run, pass the
    result through :func:`expand` before :func:`sim.engine.collect`.
    """
    if p is None:
        p = plan(ctx)
    if p is None:
        return ctx
    env, pp, k = ctx.env, ctx.pp, len(p.representatives)
    assert p.representatives == (0,), "one representative per stage"
    tallies: dict[tuple[int, int], Tally] = {}
    for s in range(pp):
        t = Tally()
        for r in range(ctx.dp):
            tallies[s, r] = t
    dp_sync = {s: StageSync(tuple(Barrier(env, k) for _ in sync.bucket_ready), env.event(), Barrier(env, k),
                            env.event())
               for s, sync in ctx.dp_sync.items()}
    n = pp * k
    return dataclasses.replace(ctx, dp=k, tallies=tallies, drained=Barrier(env, n), synced=Barrier(env, n),
                               finished=Barrier(env, n), dp_sync=dp_sync, mailbox={}, posted={})


def expand(ctx: Build) -> Build:
    """A run of :func:`reduce` as the full run it stands for (its ``dp`` given back), for collecting."""
    dp = ctx.costs.parallelism.dp
    return ctx if ctx.dp == dp else dataclasses.replace(ctx, dp=dp)
