"""Where a job runs: GPUs and clusters, rank placement, collective costs, the link model.

Pure Python, numpy and networkx: no simpy, no scikit-learn, no torch.
"""

from trainsim.topology.cluster import CLUSTER_PRESETS, ClusterSpec, cluster_from_mapping, get_cluster
from trainsim.topology.collectives import bus_bandwidth, closed_form_seconds
from trainsim.topology.graph import LinkModel, build_graph
from trainsim.topology.hardware import GPU_PRESETS, GPUSpec, get_gpu
from trainsim.topology.links import LinkId, LinkTier
from trainsim.topology.placement import Placement

__all__ = [
    "CLUSTER_PRESETS", "GPU_PRESETS", "ClusterSpec", "GPUSpec", "LinkId", "LinkModel", "LinkTier", "Placement",
    "build_graph",
    "bus_bandwidth", "closed_form_seconds", "cluster_from_mapping", "get_cluster", "get_gpu",
]
