"""Routes: the per-link nominal rates of every transfer a run will start, computed once before it.

A transfer's rate on a link is ``load * nbytes / base_s`` (bytes/s at full speed: the load of
:class:`topology.LinkModel` per byte of message, the message size, and the calibrated or
closed-form duration of the transfer alone), capped at the link's capacity (see
:mod:`sim.network`). When the size is unknown the transfer saturates its tightest link.

A fat tree's uplinks (tiers ``leaf`` and ``spine``, :mod:`topology.fabric`) are not capped: the
calibrated or closed-form duration knows the NVLink ports and NICs, not an oversubscribed spine,
so a transfer alone may find an uplink too narrow and slow down there (the network's max-min
share gives it ``capacity / rate``). Its rate on an uplink is the bytes that leave through the
NICs at the speed the NICs allow: ``load * nbytes / base_s`` times the factor by which its
tightest NIC was capped (1 when none was). So an uplink with the line rate of all the NICs
below it (oversubscription 1) can never be the bottleneck: its load is at most the sum of those
NICs' loads, and a 1:1 fat tree gives the answers of a full-bisection fabric.

The MP all-reduces of a (stage, replica) go over its MP group's links; the P2P sends of a
stage boundary over the links of its ``mp`` rank pairs (both directions, per replica); a
stage's DP all-reduce (per gradient bucket) and all-gather over all its DP groups' links at
once (one collective of all replicas).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainsim.operators import CollKind
from trainsim.sim.costs import IterationCosts
from trainsim.sim.kinds import TrafficKind
from trainsim.topology import ClusterSpec, LinkModel, Placement
from trainsim.topology.links import LinkId, LinkTier

#: link -> nominal bytes/s of one transfer on it
Rates = dict[LinkId, float]
#: What picks a route's tier: the stage, or (src stage, dst stage) for P2P.
TierKey = int | tuple[int, int]


@dataclass(frozen=True)
class Routes:
    """Per-link nominal rates of every transfer of a run, and the link tier that its jitter uses."""

    placement: Placement
    links: LinkModel
    capacities: dict[LinkId, float]
    mp: dict[tuple[int, int], Rates]  # (stage, replica)
    cp: dict[tuple[int, int], Rates]  # (stage, replica): every MP rank's CP ring
    p2p: dict[tuple[int, int, int], Rates]  # (src stage, dst stage, replica)
    dp_ar: dict[tuple[int, int], Rates]  # (stage, bucket)
    dp_ag: dict[int, Rates]  # stage
    # The tier a kind of transfer is jittered as: NIC when any of its links is a NIC. One per
    # (kind, stage), per (kind, (src, dst)) for P2P, taken from the route of the stage's last replica.
    tiers: dict[tuple[TrafficKind, TierKey], LinkTier]

    def tier(self, kind: TrafficKind, key: TierKey) -> LinkTier:
        """The tier a transfer of ``kind`` is jittered as; NIC when its stage (boundary) has no route."""
        return self.tiers.get((kind, key), LinkTier.NIC)

    def replica_links(self, stage: int, replica: int) -> set[LinkId]:
        """The links a stage replica's own transfers use: its MP and P2P routes (those it sends on)
        and the links of its own GPUs in its stage's DP collectives."""
        out: set[LinkId] = set(self.mp.get((stage, replica), ()))
        out.update(self.cp.get((stage, replica), ()))
        for (src, _dst, r), rates in self.p2p.items():
            if src == stage and r == replica:
                out.update(rates)
        par = self.placement.par
        own: set[LinkId] = set()
        for i in range(par.mp):
            for c in range(par.cp):
                own.update(self.links.rank_links(self.placement.rank(stage, replica, i, c)))
        dp_links: set[LinkId] = set(self.dp_ag.get(stage, ()))
        for (s, _k), rates in self.dp_ar.items():
            if s == stage:
                dp_links.update(rates)
        out.update(dp_links & own)
        return out


#: Tiers the calibrated durations do not know (see module doc): their rates are not capped.
FABRIC_TIERS = frozenset({LinkTier.LEAF, LinkTier.SPINE})


def _saturating(loads: Mapping[LinkId, float], caps: Mapping[LinkId, float]) -> Rates:
    """Nominal rates when the message size is unknown: the transfer alone saturates its tightest
    NVLink port or NIC (an uplink it crosses may then be over-subscribed, see module doc)."""
    if not loads:
        return {}
    own = [caps[e] / w for e, w in loads.items() if w > 0 and e.tier not in FABRIC_TIERS]
    scale = min(own) if own else min(caps[e] / w for e, w in loads.items() if w > 0)
    return {e: w * scale for e, w in loads.items() if w > 0}


def _member_rates(loads: Mapping[LinkId, float], nbytes: float, base_s: float, caps: Mapping[LinkId, float]) -> Rates:
    """Nominal rates of a transfer of ``nbytes`` taking ``base_s`` alone: capped at each NVLink port's
    and NIC's capacity; on an uplink, scaled by its NICs' cap (see module doc)."""
    rates = {e: min(w * nbytes / base_s, caps[e]) for e, w in loads.items() if w > 0 and e.tier not in FABRIC_TIERS}
    fabric = [(e, w) for e, w in loads.items() if w > 0 and e.tier in FABRIC_TIERS]
    if fabric:
        # How much the NICs slowed the transfer's bytes: the tightest NIC's capped over nominal rate.
        kappa = 1.0
        for e, w in loads.items():
            if w > 0 and e.tier is LinkTier.NIC:
                kappa = min(kappa, caps[e] / (w * nbytes / base_s))
        for e, w in fabric:
            rates[e] = w * nbytes / base_s * kappa
    return rates


def _add(into: Rates, rates: Rates) -> None:
    for e, r in rates.items():
        into[e] = into.get(e, 0.0) + r


def _tier(rates: Rates) -> LinkTier:
    return LinkTier.NIC if any(e.tier is LinkTier.NIC for e in rates) else LinkTier.NVLINK


def build_routes(costs: IterationCosts, cluster: ClusterSpec, chunks: int) -> Routes:
    """Every route of a run on ``cluster`` (``chunks`` > 1: interleaved, rank pp-1 also feeds rank 0)."""
    par = costs.parallelism
    pl = Placement(par, cluster.gpus_per_node)
    lm = LinkModel(cluster, pl)
    caps = lm.capacities
    pp, dp, mp, cp = par.pp, par.dp, par.mp, par.cp

    def member_rates(loads: Mapping[LinkId, float], nbytes: float | None, base_s: float) -> Rates:
        if nbytes is None or base_s <= 0:
            return _saturating(loads, caps)
        return _member_rates(loads, nbytes, base_s, caps)

    tiers: dict[tuple[TrafficKind, TierKey], LinkTier] = {}
    mp_routes: dict[tuple[int, int], Rates] = {}
    for s in range(pp):
        st = costs.stages[s]
        mp_bytes = st.mp_allreduce_bytes or None  # 0: size unknown, assume it saturates
        for r in range(dp):
            if mp > 1:
                rates = member_rates(lm.loads(CollKind.ALL_REDUCE, pl.mp_group(s, r)), mp_bytes, st.mp_allreduce_s)
                mp_routes[s, r] = rates
                tiers[TrafficKind.MP, s] = _tier(rates)

    cp_routes: dict[tuple[int, int], Rates] = {}
    for s in range(pp):
        st = costs.stages[s]
        if cp == 1:
            break
        for r in range(dp):
            rates = {}
            for i in range(mp):  # each MP rank's ring: every rank sends to the next at once
                ring = pl.cp_group(s, r, i)
                for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
                    _add(rates, member_rates(lm.loads_p2p(a, b), st.cp_bytes / 2 or None, st.cp_send_s))
            cp_routes[s, r] = rates
            tiers[TrafficKind.CP, s] = _tier(rates)

    p2p: dict[tuple[int, int, int], Rates] = {}
    boundaries = [(s, s + 1) for s in range(pp - 1)]
    if chunks > 1 and pp > 1:
        boundaries.append((pp - 1, 0))  # interleaved: the last rank feeds rank 0's next chunk
    for a, b in boundaries:
        for src, dst in ((a, b), (b, a)):
            # P2P cost of a boundary: stage a's forward send (its backward send mirrors it).
            st = costs.stages[min(a, b)] if (a, b) != (pp - 1, 0) else costs.stages[0]
            base = st.p2p_fwd_s
            nbytes = st.p2p_bytes or None
            for r in range(dp):
                rates = {}
                for i in range(mp):
                    for c in range(cp):
                        _add(rates, member_rates(lm.loads_p2p(pl.rank(src, r, i, c), pl.rank(dst, r, i, c)),
                                                 nbytes, base))
                p2p[src, dst, r] = rates
                tiers[TrafficKind.PP, (src, dst)] = _tier(rates)

    dp_ar: dict[tuple[int, int], Rates] = {}
    dp_ag: dict[int, Rates] = {}
    for s in range(pp):
        st = costs.stages[s]
        if par.grad_ranks == 1:
            continue
        bucket_bytes = st.dp_bucket_bytes or (None,) * len(st.dp_bucket_s)
        ag_bytes = st.dp_allgather_bytes or None
        for k, base in enumerate(st.dp_bucket_s):
            rates = {}
            for i in range(mp):
                _add(rates, member_rates(lm.loads(st.dp_reduce_kind, pl.dp_group(s, i)), bucket_bytes[k], base))
            dp_ar[s, k] = rates
        rates = {}
        for i in range(mp):
            _add(rates, member_rates(lm.loads(CollKind.ALL_GATHER, pl.dp_group(s, i)), ag_bytes, st.dp_allgather_s))
        dp_ag[s] = rates
        if dp_ar:
            tiers[TrafficKind.DP_ALLREDUCE, s] = _tier(dp_ar.get((s, 0), {}))
        tiers[TrafficKind.DP_ALLGATHER, s] = _tier(rates)

    return Routes(placement=pl, links=lm, capacities=caps, mp=mp_routes, cp=cp_routes, p2p=p2p, dp_ar=dp_ar,
                  dp_ag=dp_ag, tiers=tiers)
