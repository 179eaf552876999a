r"""Closed-form collective costs: hierarchical ring, alpha-beta.

Used when no calibrated sample covers a collective. A group spans ``n`` nodes with ``g``
GPUs on each (``p = n g`` ranks). Bytes are ``2 * entries`` (fp16/bf16). Bandwidths:

- ``B_nv = cluster.nvlink_bw``: one GPU's NVLink port, per direction;
- ``B_net = cluster.nic_bw_per_gpu = nics_per_node * nic_bw / gpus_per_node``: a GPU's
  rail-affine share of its node's NICs. This is the share it gets when every GPU of the
  node communicates at once, which is how a 3D-parallel layout runs (all MP groups, all
  DP groups of a stage together); it equals what :class:`topology.graph.LinkModel`
  gives one GPU on its own NIC, so the simulator's uncontended cost matches this one.

Latencies ``a_nv = intra_latency_s``, ``a_net = inter_latency_s`` are per ring step.

Reduce-scatter and all-gather take ``entries`` as the **per-rank shard** ``s`` (bytes
``S_s = 2 s``), as the reference samples the all-gather. Reduce-scatter runs inside the
node first, then across nodes on each rail; all-gather the reverse. Either way::

    T_ag(S_s) = (g-1) a_nv + (g-1) n S_s / B_nv  +  (n-1) a_net + (n-1) S_s / B_net

All-reduce of a buffer of ``S`` bytes per rank = reduce-scatter + all-gather of
the shard ``S / p``::

    T_ar(S) = 2 (g-1) a_nv + 2 (g-1)/g S / B_nv  +  2 (n-1) a_net + 2 (n-1)/(n g) S / B_net

Point-to-point of ``S`` bytes: ``a_nv + S / B_nv`` within a node (span (1, 2)),
``a_net + S / B_net`` across nodes (span (2, 1)).

The phases are added, not overlapped (NCCL's hierarchical algorithms pipeline them only
partly), so this is a slightly pessimistic bound for links running at their line rate,
and an optimistic one in practice: NCCL reaches well under line rate (the reference
Perlmutter samples show 1-3 GB/s effective across nodes).
"""

from __future__ import annotations

from trainsim.operators.ops import Collective, CollKind
from trainsim.topology.cluster import ClusterSpec


def _check_fits(cluster: ClusterSpec, coll: Collective) -> None:
    if coll.gpus_per_node > cluster.gpus_per_node:
        raise ValueError(f"a group with {coll.gpus_per_node} GPUs per node does not fit a node of "
                         f"{cluster.name!r} ({cluster.gpus_per_node} GPUs)")


def allgather_seconds(shard_bytes: float, nodes: int, gpn: int, cluster: ClusterSpec) -> float:
    """Hierarchical ring all-gather of a per-rank shard of ``shard_bytes``."""
    n, g = nodes, gpn
    t = 0.0
    if g > 1:
        t += (g - 1) * cluster.intra_latency_s + (g - 1) * n * shard_bytes / cluster.nvlink_bw
    if n > 1:
        t += (n - 1) * cluster.inter_latency_s + (n - 1) * shard_bytes / cluster.nic_bw_per_gpu
    return t


def closed_form_seconds(coll: Collective, cluster: ClusterSpec) -> float:
    """Seconds for one collective over ``coll.nodes`` x ``coll.gpus_per_node`` GPUs (see module doc)."""
    if coll.entries < 0 or coll.nodes < 1 or coll.gpus_per_node < 1:
        raise ValueError(f"bad collective {coll!r}")
    _check_fits(cluster, coll)
    n, g = coll.nodes, coll.gpus_per_node
    nbytes = float(coll.bytes)
    if coll.kind is CollKind.P2P:
        if (n, g) == (1, 2):
            return cluster.intra_latency_s + nbytes / cluster.nvlink_bw
        if (n, g) == (2, 1):
            return cluster.inter_latency_s + nbytes / cluster.nic_bw_per_gpu
        raise ValueError(f"a P2P transfer spans (1, 2) or (2, 1), got ({n}, {g})")
    if n * g == 1:
        return 0.0
    if coll.kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER):
        return allgather_seconds(nbytes, n, g, cluster)
    if coll.kind is CollKind.ALL_REDUCE:
        return 2.0 * allgather_seconds(nbytes / (n * g), n, g, cluster)
    raise AssertionError(coll.kind)  # pragma: no cover - enum is closed


def bus_factor(kind: CollKind, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor.

    ``algbw = bytes / seconds`` with ``bytes`` the per-rank buffer for all-reduce and the
    *whole* gathered/scattered buffer for all-gather and reduce-scatter (nccl-tests'
    convention). The bus bandwidth is comparable with a link's rate whatever the rank count.
    """
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if kind is CollKind.ALL_REDUCE:
        return 2.0 * (ranks - 1) / ranks
    if kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER):
        return (ranks - 1) / ranks
    return 1.0


def bus_bandwidth(coll: Collective, seconds: float) -> float:
    """Bus bandwidth (bytes/s) of a measured or predicted collective, nccl-tests convention.

    Our all-gather/reduce-scatter ``entries`` is the per-rank shard, so the whole buffer
    is ``ranks`` shards.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    nbytes = float(coll.bytes)
    if coll.kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER):
        nbytes *= coll.ranks
    return nbytes / seconds * bus_factor(coll.kind, coll.ranks)
