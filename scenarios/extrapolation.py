"""Which prices of a prediction lie outside the profile's sampled range, and how much they weigh.

A fitted profile answers for any shape, but only inside the range each regressor was fitted on
(``feature_min`` .. ``feature_max`` per Table I feature) is the answer measured; outside it the
profile extrapolates (``profile.extrapolate``: the edge's time held, or scaled with the work).
:func:`find_extrapolated` lists every (operator, direction, feature) asked outside its range,
with the worst value asked, the sampled range and the **share** of the iteration it prices:

    share = seconds the busiest pipeline stage spends, per iteration, in the flagged operator
            occurrences / Eq. 7's iteration time

where the busiest stage is the one with the largest forward + backward time per micro-batch
(``StageCost.fwd_s + bwd_s``, the slot Eq. 7's pipeline term takes the maximum of) and its
seconds are, per operator occurrence, its count x its price x the micro-batches for the
per-micro-batch work (forward, backward, recompute, MP / P2P / CP / FSDP collectives, at the
time ``sim.costs`` charges them: exposed parts only where it hides some), and count x price
once for the per-update work (optimizer step, gradient accumulation, the stage's own DP
gradient reduction and parameter all-gather, where Eq. 7's tail takes the first stage's). A
group of collectives charged as one exposed time (sequence parallelism's reduce-scatter and
all-gather, FSDP's gathers and scatters) is split among its members by calls x price. Pipeline
bubbles are not attributed (the stage's own busy time only; a share is capped at 1), and an
input flagged only on other stages gets share 0 (it is still listed). The total
:attr:`Extrapolation.share` is the union over the flagged occurrences: an operator flagged on two
features counts once. A simulated iteration (``trainsim run``) is reported against the same
share (its time differs from Eq. 7's by the simulation's departures, usually a few percent).

Pure: reads the duration model's ``regressors`` (key ``op:<kind>:<direction>`` or
``coll:<kind>:<nodes>x<gpus per node>``, each with ``feature_min`` / ``feature_max``) and asks
it for the flagged occurrences' prices; a model without them (a roofline) has nothing to flag.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainsim.operators.ops import (
    FEATURE_NAMES,
    UNFUSED_OF,
    Collective,
    CollKind,
    Direction,
    Op,
    OpKind,
    eager_op,
    features,
)
from trainsim.operators.spec import TrainingSpec
from trainsim.operators.stages import StagePlan
from trainsim.sim.costs import IterationCosts, StageCost
from trainsim.topology import ClusterSpec, Placement, closed_form_seconds

#: above this share of the iteration the headline says "extrapolated"
THRESHOLD = 0.01
COLLECTIVE_FEATURES = ("entries",)
PREFIX = "trainsim"


@dataclass(frozen=True)
class ExtrapolatedInput:
    """One feature of one operator (per direction) or collective group asked outside its range."""

    operator: str  # the operator kind (``linear1``) or collective kind (``all_reduce``)
    direction: str | None  # fwd, bwd or update; None for a collective
    group: str | None  # a collective's group shape, ``1x8`` (nodes x GPUs per node); None for an operator
    feature: str  # the Table I feature, e.g. ``b*l``
    value: float  # the asked value farthest outside the range (over every stage)
    sampled_min: float
    sampled_max: float
    seconds: float  # per iteration, on the busiest stage (module doc)
    share: float  # seconds / Eq. 7's iteration time

    @property
    def label(self) -> str:
        """``linear1 (fwd)`` / ``all_reduce over 1x8 GPUs``, as the profile's warnings name it."""
        if self.group is not None:
            return f"{self.operator} over {self.group} GPUs"
        return f"{self.operator} ({self.direction})"

    def to_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "direction": self.direction, "group": self.group,
                "feature": self.feature, "value": self.value,
                "sampled_range": [self.sampled_min, self.sampled_max],
                "seconds": self.seconds, "share": self.share}


@dataclass(frozen=True)
class Extrapolation:
    """What a prediction prices outside its profile's sampled range (see the module doc)."""

    records: tuple[ExtrapolatedInput, ...] = ()  # sorted by share, largest first
    share: float = 0.0  # union over the records' occurrences
    seconds: float = 0.0  # per iteration, on the busiest stage
    stage: int | None = None  # the busiest stage the shares are taken on
    mode: str | None = None  # the profile's rule outside the range (profile.extrapolate), if it says
    messages: tuple[str, ...] = ()  # the profile's ExtrapolationWarning texts these records stand for

    @property
    def flagged(self) -> bool:
        """The extrapolated share is above :data:`THRESHOLD` (the headline says so)."""
        return self.share > THRESHOLD

    def to_dict(self) -> dict[str, Any]:
        """``"extrapolated"`` of ``--json``."""
        return {"share": self.share, "seconds": self.seconds, "stage": self.stage, "mode": self.mode,
                "operators": [r.to_dict() for r in self.records]}

    def headline_note(self) -> str:
        """What the headline's iteration time gets appended: empty at or below :data:`THRESHOLD`."""
        if not self.flagged:
            return ""
        return f"  (extrapolated: {percent(self.share)} of the iteration priced outside the measured range)"

    def block(self, limit: int = 6) -> list[str]:
        """At most ``limit`` lines for stderr: a header, then the operators (directions of one
        feature and value merged), largest share first; none without records."""
        if not self.records:
            return []
        rows: dict[tuple[Any, ...], list[Any]] = {}
        for r in self.records:
            k = (r.operator, r.group, r.feature, r.value, r.sampled_min, r.sampled_max)
            row = rows.setdefault(k, [[], 0.0])
            if r.direction is not None:
                row[0].append(r.direction)
            row[1] += r.share
        order = {"fwd": 0, "bwd": 1, "update": 2}
        lines = []
        for (op, group, feat, value, lo, hi), (dirs, share) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            dirs = sorted(dirs, key=lambda d: order.get(d, 3))
            name = f"{op} over {group} GPUs" if group is not None else f"{op} {'+'.join(dirs)}"
            lines.append(f"  {percent(share):>5}  {name}: {feat} = {value:g}, sampled [{lo:g}, {hi:g}]")
        room = max(1, limit - 1)
        if len(lines) > room:
            rest = len(lines) - (room - 1)
            lines = lines[:room - 1] + [f"  … and {rest} more (--json lists all)"]
        stage = f" (busiest stage {self.stage})" if self.stage is not None else ""
        how = (f"; {self.mode}" if self.mode and " " in self.mode else
               f"; profile.extrapolate: {self.mode}" if self.mode else "")
        head = (f"{PREFIX}: extrapolated: {percent(self.share)} of the iteration{stage} is priced outside the "
                f"profile's sampled range ({len(self.records)} inputs{how}):")
        return [head, *lines]

    def other_warnings(self, messages: Iterable[str]) -> list[str]:
        """``messages`` less the extrapolation warnings :meth:`block` stands for (all of them when
        there are no records to show instead)."""
        drop = set(self.messages) if self.records else set()
        return [m for m in messages if m not in drop]


def percent(share: float) -> str:
    """``23%``, ``4.2%``, ``0.3%``."""
    p = 100 * share
    return f"{p:.0f}%" if p >= 9.95 else f"{p:.1f}%"


@dataclass(frozen=True)
class _Use:
    """One occurrence of a priced input: its regressor, names and features."""

    key: str
    operator: str
    direction: str | None
    group: str | None
    names: tuple[str, ...]
    x: tuple[float, ...]


def _op_use(op: Op, direction: Direction, regressors: Mapping[str, Any]) -> tuple[_Use, Op] | None:
    """The regressor pricing ``op`` (SwiGLU without samples: the GeLU stand-in ``sim.costs`` uses)."""
    key = f"op:{op.kind.value}:{direction.value}"
    if key not in regressors and op.kind in UNFUSED_OF:  # a fused kind without samples: its eager kind
        op = eager_op(op)
        key = f"op:{op.kind.value}:{direction.value}"
    if key not in regressors and op.kind is OpKind.SWIGLU:
        op = dataclasses.replace(op, kind=OpKind.GELU, f=3 * op.ffn // 2)
        key = f"op:{op.kind.value}:{direction.value}"
    if key not in regressors:
        return None
    names = FEATURE_NAMES.get(op.kind, ())
    return _Use(key, op.kind.value, direction.value, None, tuple(names),
                tuple(float(v) for v in features(op))), op


def _coll_use(c: Collective, regressors: Mapping[str, Any]) -> _Use | None:
    if c.ranks == 1 or c.entries == 0:
        return None  # free: never asked
    key = f"coll:{c.kind.value}:{c.nodes}x{c.gpus_per_node}"
    if key not in regressors:
        return None  # the topology's closed form (a note says so)
    return _Use(key, c.kind.value, None, f"{c.nodes}x{c.gpus_per_node}", COLLECTIVE_FEATURES, (float(c.entries),))


def _buckets(entries: int, bucket: int) -> list[int]:
    n_full, rest = divmod(entries, bucket)
    return [bucket] * n_full + ([rest] if rest else [])


#: (seconds per iteration of a group of collectives, [(collective, calls in the group)])
CollectiveGroup = tuple[float, list[tuple[Collective, int]]]


def _collective_groups(p: StagePlan, sc: StageCost, plans: Sequence[StagePlan], costs: IterationCosts,
                       training: TrainingSpec, cluster: ClusterSpec) -> list[CollectiveGroup]:
    """A stage's collectives as ``sim.costs`` charges them: (seconds per iteration of the group,
    [(collective, calls in the group)]); a group's seconds are split by calls x price."""
    par, m = costs.parallelism, costs.micro_batches
    mp_span, dp_span = costs.mp_span, costs.dp_span
    out: list[CollectiveGroup] = []
    if par.mp > 1:
        if p.mp_colls_fwd or p.mp_colls_bwd:
            for secs, listed in ((sc.mp_fwd_s, p.mp_colls_fwd), (sc.mp_bwd_s, p.mp_colls_bwd)):
                out.append((secs * m, [(Collective(CollKind.ALL_REDUCE, e, *mp_span), c) for e, c in listed]))
        elif plans[0].sequence_parallel:
            shard = plans[0].mp_allreduce_entries // par.mp
            out.append(((sc.mp_fwd_s + sc.mp_bwd_s) * m, [(Collective(CollKind.REDUCE_SCATTER, shard, *mp_span), 1),
                                                          (Collective(CollKind.ALL_GATHER, shard, *mp_span), 1)]))
        else:
            out.append(((sc.mp_fwd_s + sc.mp_bwd_s) * m,
                        [(Collective(CollKind.ALL_REDUCE, plans[0].mp_allreduce_entries, *mp_span), 1)]))
    s, spans = p.index, costs.p2p_spans
    if s < len(spans):
        out.append((sc.p2p_fwd_s * m, [(Collective(CollKind.P2P, plans[0].p2p_entries, *spans[s]), 1)]))
    if 0 < s <= len(spans):
        out.append((sc.p2p_bwd_s * m, [(Collective(CollKind.P2P, plans[0].p2p_entries, *spans[s - 1]), 1)]))
    if p.cp_ring is not None:
        span = Placement(par, cluster.gpus_per_node).cp_ring_span()
        out.append((sc.cp_fwd_s * m, [(Collective(CollKind.P2P, p.cp_ring.kv_entries, *span), 1)]))
        out.append((sc.cp_bwd_s * m, [(Collective(CollKind.P2P, 2 * p.cp_ring.kv_entries, *span), 1)]))
    if p.fsdp is not None:
        u = p.fsdp
        out.append(((sc.fsdp_fwd_s + sc.fsdp_bwd_s) * m,
                    [(Collective(CollKind.ALL_GATHER, u.layer_shard, *dp_span), u.layers),
                     (Collective(CollKind.REDUCE_SCATTER, u.layer_shard, *dp_span), u.layers),
                     (Collective(CollKind.ALL_GATHER, u.root_shard, *dp_span), 1),
                     (Collective(CollKind.REDUCE_SCATTER, u.root_shard, *dp_span), 1)]))
    for secs, nbytes in zip(sc.dp_bucket_s, sc.dp_bucket_bytes, strict=False):
        out.append((secs, [(Collective(sc.dp_reduce_kind, int(nbytes) // 2, *dp_span), 1)]))
    grad_ranks = par.grad_ranks
    ddp = p.dp_buckets is not None and bool(p.grad_segments)
    if sc.dp_allgather_s > 0 and p.fsdp is None and not ddp and grad_ranks > 1:
        counts: dict[int, int] = defaultdict(int)
        for e in _buckets(p.params // grad_ranks, training.dp_bucket):
            counts[e] += 1
        out.append((sc.dp_allgather_s, [(Collective(CollKind.ALL_GATHER, e, *dp_span), c) for e, c in counts.items()]))
    return [g for g in out if g[1]]


def stage_ops(p: StagePlan, m: int) -> list[tuple[Op, Direction, float]]:
    """(operator, direction, calls per iteration) of one stage: per micro-batch work m times."""
    out = [(oc.op, Direction.FWD, float(oc.count * m)) for oc in (*p.forward, *p.recompute)]
    out += [(oc.op, Direction.BWD, float(oc.count * m)) for oc in p.backward]
    out.append((p.optimizer, Direction.UPDATE, 1.0))
    if p.grad_accum is not None and p.grad_accum_count:
        out.append((p.grad_accum, Direction.UPDATE, float(p.grad_accum_count)))
    return out


def _outside(use: _Use, regressors: Mapping[str, Any], cache: dict[_Use, tuple[int, ...]]) -> tuple[int, ...]:
    """Indices of ``use``'s features outside its regressor's sampled range."""
    if use not in cache:
        reg = regressors[use.key]
        lo = np.asarray(getattr(reg, "feature_min", ()), dtype=float)
        hi = np.asarray(getattr(reg, "feature_max", ()), dtype=float)
        n = min(len(use.x), len(lo), len(hi))
        x = np.asarray(use.x[:n], dtype=float)
        cache[use] = tuple(int(j) for j in np.flatnonzero((x < lo[:n]) | (x > hi[:n])))
    return cache[use]


def _feature(use: _Use, j: int) -> str:
    return use.names[j] if j < len(use.names) else f"feature {j}"


def _priced(model: Any, ops: Sequence[tuple[_Use, Op, Direction, float]],
            groups: Sequence[tuple[float, list[tuple[_Use | None, Collective, int]]]],
            cluster: ClusterSpec) -> list[tuple[_Use, float]]:
    """(use, seconds per iteration) of the flagged occurrences on one stage: an operator's calls x
    its price; a collective its group's seconds split by calls x price (one member: all of them)."""
    out: list[tuple[_Use, float]] = []
    by_dir: dict[Direction, list[tuple[_Use, Op, float]]] = defaultdict(list)
    for use, priced, direction, calls in ops:
        by_dir[direction].append((use, priced, calls))
    for direction, items in by_dir.items():
        secs = np.asarray(model.op_seconds([op for _, op, _ in items], direction), dtype=float).tolist()
        out += [(use, calls * float(t)) for (use, _, calls), t in zip(items, secs, strict=True)]
    for total, tagged in groups:
        if len(tagged) == 1:
            only = tagged[0][0]
            if only is not None:
                out.append((only, total))
            continue
        colls = [c for _, c, _ in tagged]
        asked = np.asarray(model.collective_seconds(colls), dtype=float).tolist()
        prices = [t if math.isfinite(t) else closed_form_seconds(c, cluster) for c, t in zip(colls, asked, strict=True)]
        weight = sum(calls * t for (_, _, calls), t in zip(tagged, prices, strict=True))
        for (cuse, _, calls), t in zip(tagged, prices, strict=True):
            if cuse is not None:
                out.append((cuse, total * calls * t / weight if weight > 0 else 0.0))
    return out


def find_extrapolated(model: Any, plans: Sequence[StagePlan], costs: IterationCosts, training: TrainingSpec,
                      cluster: ClusterSpec, iteration_s: float, messages: Sequence[str] = ()) -> Extrapolation:
    """Every input priced outside the profile's sampled range, with its share of the iteration
    (module doc). ``messages``: the profile's extrapolation warnings, kept with the result so the
    command line can show the records instead of them."""
    regressors = getattr(model, "regressors", None)
    mode = getattr(model, "extrapolate", None)
    mode = mode if isinstance(mode, str) else None
    if getattr(model, "model", None) in ("efficiency", "monotone"):  # its operators hold the edge's efficiency
        mode = "efficiency held at the edge"
    if not isinstance(regressors, Mapping) or not regressors or not costs.stages:
        return Extrapolation(mode=mode, messages=tuple(messages))
    m = costs.micro_batches
    busiest = max(costs.stages, key=lambda st: st.fwd_s + st.bwd_s).index
    cache: dict[_Use, tuple[int, ...]] = {}
    # (key, feature name) -> (distance outside the range, use, feature index); a name can repeat
    # (fused_softmax's l, l): one record per name, its farthest value
    worst: dict[tuple[str, str], tuple[float, _Use, int]] = {}
    # on the busiest stage: flagged op occurrences (use, priced op, direction, calls) and
    # collective groups (seconds, [(use if flagged else None, collective, calls)])
    ops_here: list[tuple[_Use, Op, Direction, float]] = []
    groups_here: list[tuple[float, list[tuple[_Use | None, Collective, int]]]] = []

    def note(use: _Use, bad: tuple[int, ...]) -> None:
        reg = regressors[use.key]
        for j in bad:
            lo, hi, v = float(reg.feature_min[j]), float(reg.feature_max[j]), use.x[j]
            dist, k = max(lo - v, v - hi), (use.key, _feature(use, j))
            if k not in worst or dist > worst[k][0]:
                worst[k] = (dist, use, j)

    for p, sc in zip(plans, costs.stages, strict=False):
        here = p.index == busiest
        for op, direction, calls in stage_ops(p, m):
            found = _op_use(op, direction, regressors)
            if found is None:
                continue
            use, priced = found
            bad = _outside(use, regressors, cache)
            if bad:
                note(use, bad)
                if here:
                    ops_here.append((use, priced, direction, calls))
        for secs, members in _collective_groups(p, sc, plans, costs, training, cluster):
            tagged: list[tuple[_Use | None, Collective, int]] = []
            for c, calls in members:
                cuse = _coll_use(c, regressors)
                cbad = _outside(cuse, regressors, cache) if cuse is not None else ()
                if cuse is not None and cbad:
                    note(cuse, cbad)
                tagged.append((cuse if cbad else None, c, calls))
            if here and any(u is not None for u, _, _ in tagged):
                groups_here.append((secs, tagged))
    if not worst:
        return Extrapolation(stage=busiest, mode=mode, messages=tuple(messages))
    with warnings.catch_warnings():  # the prices were asked (and warned about) when the costs were built
        warnings.simplefilter("ignore")
        occurrences = _priced(model, ops_here, groups_here, cluster)

    per_feature: dict[tuple[str, str], float] = defaultdict(float)
    flagged_s = 0.0
    for use, secs in occurrences:
        flagged_s += secs
        for name in {_feature(use, j) for j in _outside(use, regressors, cache)}:
            per_feature[(use.key, name)] += secs

    def share(secs: float) -> float:
        return min(1.0, secs / iteration_s) if iteration_s > 0 else 0.0

    records = []
    for (key, name), (_, use, j) in worst.items():
        reg = regressors[key]
        secs = per_feature.get((key, name), 0.0)
        records.append(ExtrapolatedInput(
            operator=use.operator, direction=use.direction, group=use.group, feature=name, value=use.x[j],
            sampled_min=float(reg.feature_min[j]), sampled_max=float(reg.feature_max[j]),
            seconds=secs, share=share(secs)))
    records.sort(key=lambda r: (-r.share, r.operator, r.direction or "", r.group or "", r.feature))
    return Extrapolation(tuple(records), share(flagged_s), flagged_s, busiest, mode, tuple(messages))
