"""The link model: which links a group's traffic crosses, and how much.

Structure (:func:`build_graph`): every GPU has one NVLink port into its node's NVSwitch
and a PCIe path to its NIC(s); every NIC has one port into the fabric (the InfiniBand or
Slingshot switch network). By default (``cluster.fabric`` of kind ``full_bisection``) the
fabric has **full bisection bandwidth**, so it is not a bottleneck and carries no link id of
its own. A ``fat_tree`` fabric (:mod:`topology.fabric`) adds one aggregate uplink port per leaf
switch (and per pod in a 3-level tree); see "Fat-tree uplinks" below. PCIe between GPU and NIC
is not a bottleneck (Gen4/Gen5 x16 exceeds a 200/400 Gb/s NIC).

Rail mapping: GPU with local index ``j`` uses NIC ``j * nics_per_node // gpus_per_node``
when a node has no more NICs than GPUs (several GPUs may share one); with more NICs than
GPUs it owns NICs ``j*N//G .. (j+1)*N//G - 1`` and spreads its traffic evenly over them.

Link ids (what :class:`LinkModel` reports loads on) are :class:`topology.links.LinkId`: typed
(tier, node, GPU or NIC index), and equal to their text:

- ``"nvlink:<rank>"``: a GPU's NVLink port, capacity ``nvlink_bw`` per direction;
- ``"nic:<node>.<i>"``: NIC ``i`` of a node, capacity ``nic_bw`` per direction;
- ``"leaf:<group>"`` (or ``"leaf:<group>.<rail>"`` when rail-optimised): a leaf switch's uplinks
  into the spines as one port, capacity ``NICs below it * nic_bw / oversubscription``;
- ``"spine:<pod>"`` (3 levels): a pod's uplinks into the core as one port, capacity
  ``NICs below it * nic_bw / (oversubscription * spine_oversubscription)``.

A link id stands for a full-duplex port; loads are bytes per direction. Ring collectives
load both directions of a port equally, so one number describes them. A P2P transfer
loads the sender's port outbound and the receiver's inbound; a simulator that adds loads
per link id treats opposite-direction transfers on the same port as sharing it, which is
conservative.

Loads for a hierarchical ring over a group (see :mod:`topology.collectives`), with ``c``
the group's GPUs on a node and ``n`` its nodes, per byte of *message*:

- all-reduce (message = per-rank buffer): NVLink port ``2(c-1)/c``, the GPU's NIC share
  ``2(n-1)/(n c)``;
- all-gather / reduce-scatter (message = per-rank shard): NVLink ``(c-1) n``, NIC ``n-1``.

A GPU's NIC load lands on its rail NIC(s); GPUs sharing a NIC add up.

Fat-tree uplinks. Traffic between NICs under different leaves crosses the sender's leaf uplink
(outbound) and the receiver's (inbound); between pods also both pods' uplinks. ECMP is taken as
perfect spreading over the spine links, so a leaf's uplinks are one aggregate port. The
inter-node phase of a hierarchical ring is ``c`` rings (one per position of the group's GPUs on
a node), each over the group's ``n`` nodes in group order; ring edge ``u -> v`` carries, per
direction and per byte of message, what ``u`` puts on its NIC: ``2(n-1)/(n c)`` for an
all-reduce (a ring all-reduce of the ``1/c`` slice each rail ring owns: every member sends
``2(n-1)/n`` of it), ``n-1`` for an all-gather or reduce-scatter. So a leaf uplink's load is
``(ring edges leaving the leaf) * that coefficient``, summed over the rings, taking the larger
of the two directions (a ring leaves a leaf as often as it enters it, so they are equal for
uniform groups). Examples (all-reduce, one GPU per node, ``c = 1``, 8 nodes, 4 per leaf):

- not rail-optimised: the ring crosses from leaf 0 to leaf 1 once and back once, so each leaf
  uplink carries ``2 * 7/8 = 1.75`` bytes per byte, as much as one NIC; ``m`` such groups side by
  side (one per rail, the ``m`` DP groups of an MP-``m`` stage) put ``1.75 m`` on it;
- rail-optimised: the ``m`` rings use different rails, so each rail's leaf uplink carries one
  ring's ``1.75``;
- a ring whose nodes all sit under one leaf (rail-optimised: one rail group) leaves no load above it.

A P2P transfer across leaves puts its bytes on both leaf uplinks (like its two NICs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import CollKind
from trainsim.topology.cluster import ClusterSpec
from trainsim.topology.links import LinkId, LinkTier, tier_of

if TYPE_CHECKING:  # networkx costs 0.2 s to import; only build_graph needs it
    import networkx as nx
from trainsim.topology.placement import Placement


def rail_nics(cluster: ClusterSpec, local_index: int) -> tuple[tuple[int, float], ...]:
    """The NICs a GPU of local index ``local_index`` uses, each with its share of the GPU's traffic."""
    g, n = cluster.gpus_per_node, cluster.nics_per_node
    if not 0 <= local_index < g:
        raise IndexError(f"local GPU index {local_index} outside 0..{g - 1}")
    if n <= g:
        return ((local_index * n // g, 1.0),)
    lo, hi = local_index * n // g, (local_index + 1) * n // g
    return tuple((i, 1.0 / (hi - lo)) for i in range(lo, hi))


def build_graph(cluster: ClusterSpec, nodes: int) -> nx.Graph:
    """GPUs, NVSwitches, NICs and the fabric of ``nodes`` nodes as an undirected graph.

    Graph nodes: ``"gpu<r>"`` (attribute ``node``), ``"nvswitch<n>"`` (only when a node has
    more than one GPU), ``"nic<n>.<i>"``, ``"fabric"`` (the top of the switch network), and in a
    fat tree ``"leafsw<group>[.<rail>]"`` and (3 levels) ``"pod<p>"``. Edges carry ``capacity`` (bytes/s
    per direction), ``tier`` (a :class:`LinkTier`) and ``link`` (the LinkModel :class:`LinkId`
    whose capacity bounds the edge). The GPU-NIC (PCIe) edge and the NIC-fabric edge both
    belong to the NIC's link.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError("cluster.nodes", f"must be a positive integer, got {nodes!r}")
    cluster.check_nodes(nodes)
    gpn = cluster.gpus_per_node
    import networkx as nx

    gr = nx.Graph(cluster=cluster.name)
    gr.add_node("fabric", kind="fabric")
    fab = cluster.fabric
    for node in range(nodes):
        if gpn > 1:
            gr.add_node(f"nvswitch{node}", kind="nvswitch", node=node)
        for i in range(cluster.nics_per_node):
            nic = f"nic{node}.{i}"
            gr.add_node(nic, kind="nic", node=node)
            up = "fabric"
            if fab.has_links:  # NIC -> its leaf switch -> (its pod's spines ->) the top of the tree
                group, rail = fab.leaf(node, i)
                up = f"leafsw{group}" + (f".{rail}" if rail >= 0 else "")
                if up not in gr:
                    gr.add_node(up, kind="leaf")
                    top = "fabric"
                    if fab.levels == 3:
                        top = f"pod{fab.pod(node)}"
                        if top not in gr:
                            gr.add_node(top, kind="pod")
                            gr.add_edge(top, "fabric", tier=LinkTier.SPINE, link=LinkId.spine(fab.pod(node)),
                                        capacity=fab.pod_uplink_bw(cluster.nics_per_node, cluster.nic_bw))
                    gr.add_edge(up, top, tier=LinkTier.LEAF, link=LinkId.leaf(group, rail),
                                capacity=fab.leaf_uplink_bw(cluster.nics_per_node, cluster.nic_bw))
            gr.add_edge(nic, up, capacity=cluster.nic_bw, tier=LinkTier.NIC, link=LinkId.nic(node, i))
        for j in range(gpn):
            r = node * gpn + j
            gpu = f"gpu{r}"
            gr.add_node(gpu, kind="gpu", node=node, rank=r)
            if gpn > 1:
                gr.add_edge(gpu, f"nvswitch{node}", capacity=cluster.nvlink_bw, tier=LinkTier.NVLINK,
                            link=LinkId.nvlink(r, node))
            for i, share in rail_nics(cluster, j):
                gr.add_edge(gpu, f"nic{node}.{i}", capacity=cluster.nic_bw, tier=LinkTier.NIC,
                            link=LinkId.nic(node, i), share=share)
    return gr


class LinkModel:
    """Per-link loads of every group of a placement on a cluster (see module doc)."""

    def __init__(self, cluster: ClusterSpec, placement: Placement) -> None:
        if placement.gpus_per_node != cluster.gpus_per_node:
            raise ConfigError("cluster.gpus_per_node", f"placement uses {placement.gpus_per_node} GPUs per node, "
                                                       f"cluster {cluster.name!r} has {cluster.gpus_per_node}")
        cluster.check_nodes(placement.nodes)
        self.cluster = cluster
        self.placement = placement
        gpn, nodes = cluster.gpus_per_node, placement.nodes
        self._gpn = gpn
        self._nvlink_ids = [LinkId.nvlink(r, r // gpn) for r in range(placement.gpus)] if gpn > 1 else []
        self._nic_ids = [[LinkId.nic(node, i) for i in range(cluster.nics_per_node)] for node in range(nodes)]
        self._rails = [rail_nics(cluster, j) for j in range(gpn)]
        caps: dict[LinkId, float] = {}
        for link in self._nvlink_ids:
            caps[link] = cluster.nvlink_bw
        for ids in self._nic_ids:
            for link in ids:
                caps[link] = cluster.nic_bw
        # The fat tree's uplinks: one per leaf and pod the job's nodes touch (see module doc).
        fab = cluster.fabric
        self._fabric = fab if fab.has_links else None
        self._leaf_ids: list[list[LinkId]] = []  # [node][nic index] -> the uplink of the NIC's leaf
        self._pod_ids: list[LinkId] = []  # [node] -> its pod's uplink (levels 3)
        if self._fabric is not None:
            leaf_bw = fab.leaf_uplink_bw(cluster.nics_per_node, cluster.nic_bw)
            for node in range(nodes):
                row = [LinkId.leaf(*fab.leaf(node, i)) for i in range(cluster.nics_per_node)]
                self._leaf_ids.append(row)
                for link in row:
                    caps[link] = leaf_bw
            if fab.levels == 3:
                pod_bw = fab.pod_uplink_bw(cluster.nics_per_node, cluster.nic_bw)
                self._pod_ids = [LinkId.spine(fab.pod(node)) for node in range(nodes)]
                for link in self._pod_ids:
                    caps[link] = pod_bw
        self.capacities: dict[LinkId, float] = caps
        # Coefficients depend only on (kind, nodes, GPUs on the node): a handful of values.
        self._coef_cache: dict[tuple[CollKind, int, int], tuple[float, float]] = {}

    @staticmethod
    def tier(link_id: LinkId | str) -> LinkTier:
        """The link's tier (a :class:`LinkId`'s own; text is looked up with :meth:`LinkId.parse`)."""
        tier = tier_of(link_id)
        if tier is None:
            raise KeyError(f"not a link id: {link_id!r}")
        return tier

    def rank_links(self, rank: int) -> tuple[LinkId, ...]:
        """The links GPU ``rank``'s own traffic crosses: its NVLink port and its rail NIC(s)."""
        nd, j = divmod(rank, self._gpn)
        port = (self._nvlink_ids[rank],) if self._nvlink_ids else ()
        return port + tuple(self._nic_ids[nd][i] for i, _ in self._rails[j])

    def _coefficients(self, kind: CollKind, n: int, c: int) -> tuple[float, float]:
        """(NVLink port load, NIC load of one GPU) per byte of message."""
        key = (kind, n, c)
        coef = self._coef_cache.get(key)
        if coef is None:
            if kind is CollKind.ALL_REDUCE:
                coef = (2.0 * (c - 1) / c, 2.0 * (n - 1) / (n * c))
            elif kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER):
                coef = (float((c - 1) * n), float(n - 1))
            else:
                raise ValueError(f"use loads_p2p for {kind.value}")
            self._coef_cache[key] = coef
        return coef

    def loads(self, kind: CollKind, ranks: Sequence[int]) -> dict[LinkId, float]:
        """Bytes crossing each link (per direction) per byte of message, for a hierarchical ring.

        The message is the per-rank buffer for an all-reduce, the per-rank shard for an
        all-gather or reduce-scatter. Links with no load are left out. A group of one rank
        moves nothing.
        """
        if kind is CollKind.P2P:
            raise ValueError("use loads_p2p for point-to-point transfers")
        if len(ranks) <= 1:
            return {}
        gpn = self._gpn
        per_node: dict[int, int] = {}
        for r in ranks:
            nd = r // gpn
            per_node[nd] = per_node.get(nd, 0) + 1
        n = len(per_node)
        out: dict[LinkId, float] = {}
        nvlink_ids, nic_ids, rails = self._nvlink_ids, self._nic_ids, self._rails
        for r in ranks:
            nd, j = divmod(r, gpn)
            c = per_node[nd]
            intra, inter = self._coefficients(kind, n, c)
            if c > 1:
                out[nvlink_ids[r]] = intra
            if n > 1:
                ids = nic_ids[nd]
                for i, share in rails[j]:
                    link = ids[i]
                    out[link] = out.get(link, 0.0) + inter * share
        if n > 1 and self._fabric is not None:
            self._ring_fabric_loads(kind, ranks, per_node, out)
        return out

    def _ring_fabric_loads(self, kind: CollKind, ranks: Sequence[int], per_node: dict[int, int],
                           out: dict[LinkId, float]) -> None:
        """Add the leaf (and pod) uplink loads of a hierarchical ring to ``out`` (see module doc).

        The inter-node phase runs one ring per position ``k``: the ``k``-th group member of every
        node, nodes in the order the group first names them (Megatron's groups: ascending). Each
        ring edge carries, per direction, what its sender puts on its NIC, ``inter`` per byte of
        message (the NIC coefficient). An edge whose ends sit under different leaves crosses the
        sender's leaf uplink outbound and the receiver's inbound. A port's load is the larger of
        its two directions (equal for a ring of equal members: it leaves a leaf as often as it
        enters it).
        """
        gpn = self._gpn
        members: dict[int, list[int]] = {}  # node -> its group ranks, in group order
        for r in ranks:
            members.setdefault(r // gpn, []).append(r)
        order = list(members)
        n = len(order)
        up: dict[LinkId, float] = {}
        down: dict[LinkId, float] = {}
        for k in range(max(per_node.values())):
            ring = [members[nd][k] for nd in order if k < len(members[nd])]
            if len(ring) < 2:
                continue
            for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
                w = self._coefficients(kind, n, per_node[a // gpn])[1]
                self._cross(a, b, w, up, down)
        for link in [*up, *(e for e in down if e not in up)]:  # insertion order: runs are reproducible
            out[link] = max(up.get(link, 0.0), down.get(link, 0.0))

    def _cross(self, src: int, dst: int, w: float, up: dict[LinkId, float], down: dict[LinkId, float]) -> None:
        """Add ``w`` bytes per byte from GPU ``src`` to GPU ``dst`` (different nodes) to the uplinks
        it crosses: ``up`` for the sender's side, ``down`` for the receiver's.

        The sender's traffic leaves on its rail NIC(s) and arrives on the receiver's; with as many
        NICs on both sides they pair up rail by rail (NCCL's rings stay on a rail), otherwise every
        pair carries the product of the shares.
        """
        gpn = self._gpn
        (sn, sj), (dn, dj) = divmod(src, gpn), divmod(dst, gpn)
        rs, rd = self._rails[sj], self._rails[dj]
        if len(rs) == len(rd):
            pairs = [(i, i2, share) for (i, share), (i2, _) in zip(rs, rd, strict=True)]
        else:
            pairs = [(i, i2, s1 * s2) for i, s1 in rs for i2, s2 in rd]
        leaf_ids, pod_ids = self._leaf_ids, self._pod_ids
        for i, i2, share in pairs:
            a, b = leaf_ids[sn][i], leaf_ids[dn][i2]
            if a != b:
                up[a] = up.get(a, 0.0) + w * share
                down[b] = down.get(b, 0.0) + w * share
                if pod_ids and pod_ids[sn] != pod_ids[dn]:
                    pa, pb = pod_ids[sn], pod_ids[dn]
                    up[pa] = up.get(pa, 0.0) + w * share
                    down[pb] = down.get(pb, 0.0) + w * share

    def loads_p2p(self, src_rank: int, dst_rank: int) -> dict[LinkId, float]:
        """Bytes per byte of message on each link of a transfer: both NVLink ports within a
        node, both GPUs' rail NICs across nodes."""
        if src_rank == dst_rank:
            return {}
        gpn = self._gpn
        (sn, sj), (dn, dj) = divmod(src_rank, gpn), divmod(dst_rank, gpn)
        if sn == dn:
            return {self._nvlink_ids[src_rank]: 1.0, self._nvlink_ids[dst_rank]: 1.0}
        out: dict[LinkId, float] = {}
        for nd, j in ((sn, sj), (dn, dj)):
            for i, share in self._rails[j]:
                link = self._nic_ids[nd][i]
                out[link] = out.get(link, 0.0) + share
        if self._fabric is not None:
            # One port id per uplink: the sender's outbound and the receiver's inbound add up on
            # it, like a NIC's (conservative for opposite-direction transfers, see module doc).
            up: dict[LinkId, float] = {}
            self._cross(src_rank, dst_rank, 1.0, up, up)
            out.update(up)
        return out

    def uncontended_seconds(self, kind: CollKind, ranks: Sequence[int], nbytes: float) -> float:
        """Duration of one collective (or, for P2P, a transfer from ranks[0] to ranks[1]) alone on the links.

        Ring latency plus, per tier, the busiest link's ``load * nbytes / capacity``; tiers are
        added as in :func:`topology.collectives.closed_form_seconds`, which this equals for
        uniform groups when each GPU has a NIC of its own.
        """
        cl = self.cluster
        if kind is CollKind.P2P:
            src, dst = ranks
            loads = self.loads_p2p(src, dst)
            if not loads:
                return 0.0
            same = src // self._gpn == dst // self._gpn
            latency = cl.intra_latency_s if same else cl.inter_latency_s
        else:
            if len(ranks) <= 1:
                return 0.0
            loads = self.loads(kind, ranks)
            nodes, most = self.placement.span(ranks)
            steps = 2 if kind is CollKind.ALL_REDUCE else 1
            latency = steps * ((most - 1) * cl.intra_latency_s + (nodes - 1) * cl.inter_latency_s)
        # The inter-node phase runs at its slowest link: a NIC or a fat tree's uplink on its way.
        worst = {LinkTier.NVLINK: 0.0, LinkTier.NIC: 0.0}
        for link, load in loads.items():
            t = load * nbytes / self.capacities[link]
            tier = LinkTier.NVLINK if link.tier is LinkTier.NVLINK else LinkTier.NIC
            if t > worst[tier]:
                worst[tier] = t
        return latency + worst[LinkTier.NVLINK] + worst[LinkTier.NIC]
