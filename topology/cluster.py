"""Cluster presets and the scenario's ``cluster:`` section.

A :class:`ClusterSpec` holds bandwidths in bytes/s *per direction* and latencies in
seconds. Network figures are link rates from the vendors' documents; what NCCL
achieves is lower, which is why calibrated collective samples win whenever they exist.

Latencies are per ring step (one hop of a ring collective), the order of magnitude of
NCCL's own tuning model (src/graph/tuning.cc ``hwLat``: a few microseconds per NVLink
hop, somewhat more per network hop for the Simple protocol used by large messages).
They matter only for small messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from trainsim.operators.errors import ConfigError, check_keys, check_number, require_int
from trainsim.topology.fabric import FULL_BISECTION, FabricSpec, fabric_from_mapping
from trainsim.topology.hardware import GPU_PRESETS, GPUSpec, get_gpu

DEFAULT_INTRA_LATENCY_S = 4e-6
DEFAULT_INTER_LATENCY_S = 8e-6


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes of ``gpus_per_node`` identical GPUs, an NVSwitch per node, NICs into one fabric.

    ``nvlink_bw``: bytes/s per GPU per direction into the node's NVSwitch fabric (0 when
    there is one GPU per node). ``nic_bw``: bytes/s per NIC per direction. ``fabric``: the
    switch network between NICs (:mod:`topology.fabric`); full bisection bandwidth unless a
    fat tree is given. ``max_nodes`` is None when the cluster size does not limit the
    scenarios of interest.
    """

    name: str
    gpu: GPUSpec
    gpus_per_node: int
    max_nodes: int | None
    nvlink_bw: float
    nic_bw: float
    nics_per_node: int
    intra_latency_s: float = DEFAULT_INTRA_LATENCY_S
    inter_latency_s: float = DEFAULT_INTER_LATENCY_S
    fabric: FabricSpec = FULL_BISECTION

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPUSpec):
            raise ConfigError("cluster.gpu", f"expected a GPUSpec, got {self.gpu!r}")
        if not isinstance(self.fabric, FabricSpec):
            raise ConfigError("cluster.fabric", f"expected a FabricSpec, got {self.fabric!r}")
        require_int("cluster.gpus_per_node", self.gpus_per_node)
        require_int("cluster.nics_per_node", self.nics_per_node)
        if self.max_nodes is not None:
            require_int("cluster.max_nodes", self.max_nodes)
        _require_number("cluster.nic_bw", self.nic_bw, positive=True)
        _require_number("cluster.nvlink_bw", self.nvlink_bw, positive=False)
        if self.gpus_per_node > 1 and not self.nvlink_bw > 0:
            raise ConfigError("cluster.nvlink_bw", f"must be positive when gpus_per_node > 1 "
                                                   f"({self.gpus_per_node}), got {self.nvlink_bw!r}")
        _require_number("cluster.intra_latency_s", self.intra_latency_s, positive=False)
        _require_number("cluster.inter_latency_s", self.inter_latency_s, positive=False)

    @property
    def nic_bw_per_gpu(self) -> float:
        """A GPU's fair share of its node's NIC bandwidth (bytes/s per direction).

        Rail-affine: every GPU of a node talks through its own NIC(s), so when all GPUs of
        a node communicate at once (every DP or MP group of a layout runs concurrently)
        each gets ``nics_per_node * nic_bw / gpus_per_node``.
        """
        return self.nics_per_node * self.nic_bw / self.gpus_per_node

    def check_nodes(self, nodes: int) -> None:
        """Raise when a layout needs more nodes than the cluster has."""
        if self.max_nodes is not None and nodes > self.max_nodes:
            raise ConfigError("parallelism", f"the layout needs {nodes} nodes of {self.gpus_per_node} GPUs; "
                                             f"cluster {self.name!r} has at most {self.max_nodes}")


def _require_number(field: str, value: object, positive: bool) -> None:
    check_number(field, value, positive=positive, minimum=None if positive else 0)


_GBIT = 1e9 / 8  # bytes/s in one Gb/s
#: What one H100/H200 moves through its NVLink 4 port per direction, measured, not the datasheet's
#: 450 GB/s: the most any NCCL collective reached on the lent 4x H100 NVSwitch host
#: (validation/collectives_h100_4gpu: all-reduce over 4 GPUs at 4 GiB, 360 GB/s bus bandwidth; P2P
#: 368 GB/s). Closed-form collective times and the contention model's port capacity use it; two
#: collectives on one port at once (validation/concurrent_h100_4gpu) moved 306-337 GB/s together,
#: so the model still under-prices that contention by 5-32 % (24-40 % at 450 GB/s; docs/multi_gpu.md).
NVLINK4_MEASURED_BW = 360e9

CLUSTER_PRESETS: dict[str, ClusterSpec] = {
    # NERSC Perlmutter GPU node: 4 A100-SXM4, NVLink 3 (12 links x 50 GB/s = 600 GB/s
    # bidirectional per GPU, 300 GB/s each way), 4 HPE Slingshot-11 NICs at 200 Gb/s. The paper
    # ran up to 32 nodes; the machine is larger, so no limit here. Fabric: HPE Slingshot-11 in a
    # dragonfly, not a fat tree; the leaf/spine model does not describe it, so full_bisection
    # (the global links' taper is not modelled).
    "perlmutter": ClusterSpec("perlmutter", GPU_PRESETS["a100-sxm4-80gb"], gpus_per_node=4, max_nodes=None,
                              nvlink_bw=300e9, nic_bw=200 * _GBIT, nics_per_node=4),
    # TACC Vista GH200 node: one superchip per node (NVLink-C2C links CPU and GPU only), one
    # NDR InfiniBand NIC at 400 Gb/s. Fabric: full_bisection; we have no published
    # oversubscription figure for Vista's InfiniBand network, so none is assumed.
    "vista": ClusterSpec("vista", GPU_PRESETS["gh200"], gpus_per_node=1, max_nodes=None,
                         nvlink_bw=0.0, nic_bw=400 * _GBIT, nics_per_node=1),
    # NVIDIA DGX H100 user guide: 8 H100 SXM, NVLink 4 at 900 GB/s bidirectional per GPU through
    # NVSwitch, 8 ConnectX-7 NICs at 400 Gb/s NDR (one per GPU) for the compute fabric.
    # Fabric: the DGX SuperPOD H100 reference architecture's compute network is a rail-optimised,
    # non-blocking (1:1) fat tree of 32-node scalable units; non-blocking, so full_bisection (a 1:1
    # fat tree gives the same answers, docs/fabric.md). To study a tapered build, set e.g.
    # cluster.fabric = {kind: fat_tree, nodes_per_leaf: 32, rail_optimized: true, oversubscription: 2}.
    "dgx-h100": ClusterSpec("dgx-h100", GPU_PRESETS["h100-sxm"], gpus_per_node=8, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=8),
    # NVIDIA DGX H200: the DGX H100 chassis with H200 GPUs; fabric as dgx-h100 (full_bisection).
    "dgx-h200": ClusterSpec("dgx-h200", GPU_PRESETS["h200"], gpus_per_node=8, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=8),
    # NVIDIA DGX A100 user guide: 8 A100 80 GB, NVLink 3 via NVSwitch (600 GB/s bidirectional),
    # 8 ConnectX-6 NICs at 200 Gb/s HDR for the compute fabric. Fabric: the DGX SuperPOD A100
    # reference architecture's compute network is a rail-optimised, non-blocking fat tree of 20-node
    # scalable units, so full_bisection.
    "dgx-a100": ClusterSpec("dgx-a100", GPU_PRESETS["a100-sxm4-80gb"], gpus_per_node=8, max_nodes=None,
                            nvlink_bw=300e9, nic_bw=200 * _GBIT, nics_per_node=8),
    # NVIDIA HGX H100 / HGX H200 8-GPU baseboards (NVIDIA HGX AI supercomputing platform datasheet):
    # 8 SXM GPUs, NVLink 4 through NVSwitch at 900 GB/s bidirectional per GPU (450 GB/s each way);
    # the server builds on them carry one 400 Gb/s NDR NIC (ConnectX-7) per GPU, 8 per node, for
    # the compute fabric (the reference design's 1:1 GPU-NIC rails). The same figures as the DGX
    # presets: an HGX system is a DGX-class node from another vendor. Fabric: the vendor's build
    # decides it and none is published for these presets, so full_bisection; give cluster.fabric
    # for a known tapered network.
    "hgx-h100": ClusterSpec("hgx-h100", GPU_PRESETS["h100-sxm"], gpus_per_node=8, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=8),
    "hgx-h200": ClusterSpec("hgx-h200", GPU_PRESETS["h200"], gpus_per_node=8, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=8),
    # One H100 SXM on its own: for single-GPU runs (a 1-GPU job on a DGX preset is rejected
    # because the layout would not fill a node). Fabric: full_bisection (one node, no network traffic).
    # An SXM part always sits on an NVLink board (HGX), so its NVLink port is the HGX preset's:
    # unused at one GPU per node, and --set cluster.gpus_per_node=2 gives a valid 2-GPU node.
    "h100-sxm": ClusterSpec("h100-sxm", GPU_PRESETS["h100-sxm"], gpus_per_node=1, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=1),
    # One H200 SXM on its own, as h100-sxm is one H100 (the lent single-GPU machines of docs/h100.md)
    "h200-sxm": ClusterSpec("h200-sxm", GPU_PRESETS["h200"], gpus_per_node=1, max_nodes=None,
                            nvlink_bw=NVLINK4_MEASURED_BW, nic_bw=400 * _GBIT, nics_per_node=1),
}


def get_cluster(name: str) -> ClusterSpec:
    try:
        return CLUSTER_PRESETS[str(name).lower()]
    except KeyError:
        known = ", ".join(sorted(CLUSTER_PRESETS))
        raise ConfigError("cluster.preset", f"unknown cluster preset {name!r}; known: {known}") from None


# scenario key -> (ClusterSpec field, factor from the scenario unit to the field's unit)
_SCALED_KEYS: dict[str, tuple[str, float]] = {
    "nvlink_gbps": ("nvlink_bw", 1e9),  # GB/s per GPU per direction -> bytes/s
    "nic_gbps": ("nic_bw", _GBIT),  # Gb/s per NIC (the NIC's line rate) -> bytes/s
    "intra_latency_us": ("intra_latency_s", 1e-6),
    "inter_latency_us": ("inter_latency_s", 1e-6),
}
_INT_KEYS = ("gpus_per_node", "nics_per_node", "max_nodes")
_KNOWN_KEYS = frozenset({"preset", "name", "gpu", "fabric", *_INT_KEYS, *_SCALED_KEYS})


def cluster_from_mapping(d: Mapping[str, object]) -> ClusterSpec:
    """Build a cluster from a scenario's ``cluster:`` section.

    Keys (units are in the names)::

        preset            a name from CLUSTER_PRESETS; other keys override its values (overriding
                          gpus_per_node alone scales nics_per_node with it: NICs per GPU stay)
        name              free text (defaults to the preset's name, or "custom")
        gpu               a name from GPU_PRESETS
        gpus_per_node     int
        nics_per_node     int
        max_nodes         int, or null for no limit
        nvlink_gbps       GB/s (gigabytes) per GPU per direction into the NVSwitch fabric
        nic_gbps          Gb/s (gigabits) line rate of one NIC, per direction
        intra_latency_us  microseconds per intra-node ring step
        inter_latency_us  microseconds per inter-node ring step
        fabric            the switch network between NICs (topology.fabric.fabric_from_mapping):
                          {kind: fat_tree, nodes_per_leaf: 32, oversubscription: 2,
                          rail_optimized: true}; keys not given keep the preset's fabric

    Without ``preset`` the section must give ``gpu``, ``gpus_per_node``, ``nic_gbps``,
    ``nics_per_node``, and ``nvlink_gbps`` when ``gpus_per_node > 1``; latencies default to
    DEFAULT_INTRA_LATENCY_S / DEFAULT_INTER_LATENCY_S and ``max_nodes`` to no limit.
    """
    if not isinstance(d, Mapping):
        raise ConfigError("cluster", f"expected a mapping, got {type(d).__name__}")
    check_keys("cluster", d, sorted(_KNOWN_KEYS))

    values: dict[str, object] = {}
    for key in _INT_KEYS:
        if key in d:
            if key == "max_nodes" and d[key] is None:
                values[key] = None
            else:
                values[key] = require_int(f"cluster.{key}", d[key])
    for key, (attr, factor) in _SCALED_KEYS.items():
        if key in d:
            v = d[key]
            _require_number(f"cluster.{key}", v, positive=False)
            values[attr] = float(v) * factor  # type: ignore[arg-type]
    if "gpu" in d:
        values["gpu"] = get_gpu(d["gpu"])  # type: ignore[arg-type]
    if "name" in d:
        values["name"] = str(d["name"])

    if "preset" in d:
        base = get_cluster(d["preset"])  # type: ignore[arg-type]
        if "fabric" in d:
            values["fabric"] = fabric_from_mapping(d["fabric"], base.fabric)
        if "gpus_per_node" in values and "nics_per_node" not in values:
            values["nics_per_node"] = _nics_following(base, values["gpus_per_node"])  # type: ignore[arg-type]
        if values.get("gpus_per_node", 1) > 1 and "nvlink_bw" not in values and not base.nvlink_bw > 0:  # type: ignore[operator]
            raise ConfigError("cluster.nvlink_gbps", f"preset {base.name!r} has no NVLink between GPUs (one GPU "
                                                     f"per node); give cluster.nvlink_gbps for a node of "
                                                     f"{values['gpus_per_node']} GPUs")
        return _renamed_errors(lambda: replace(base, **values))  # type: ignore[arg-type]

    required = ["gpu", "gpus_per_node", "nic_gbps", "nics_per_node"]
    if values.get("gpus_per_node", 1) > 1:  # type: ignore[operator]
        required.append("nvlink_gbps")
    for key in required:
        if key not in d:
            raise ConfigError(f"cluster.{key}", "required when no cluster.preset is given")
    if "fabric" in d:
        values["fabric"] = fabric_from_mapping(d["fabric"])
    values.setdefault("name", "custom")
    values.setdefault("max_nodes", None)
    values.setdefault("nvlink_bw", 0.0)
    return _renamed_errors(lambda: ClusterSpec(**values))  # type: ignore[arg-type]


def _nics_following(base: ClusterSpec, gpus_per_node: int) -> int:
    """NICs per node when a preset's ``gpus_per_node`` is overridden and ``nics_per_node`` is not.

    A node keeps the preset's NICs *per GPU*: every preset here wires its NICs as rails, one per
    GPU (DGX/HGX, Perlmutter) or one per node of one GPU (Vista, h100-sxm), so a 2-GPU node of
    ``dgx-h100`` has 2 NICs, and a GPU's NIC share (``nic_bw_per_gpu``) stays the preset's. Keeping
    the preset's NIC count instead would give each of the 2 GPUs 4 NICs, 4x the network bandwidth
    of the machine it describes. A ratio that gives no whole number of NICs is refused rather
    than rounded: the user says how many.
    """
    if gpus_per_node < 1:  # ClusterSpec reports it under its own field
        return base.nics_per_node
    nics, rest = divmod(base.nics_per_node * gpus_per_node, base.gpus_per_node)
    if rest or nics < 1:
        raise ConfigError("cluster.nics_per_node",
                          f"preset {base.name!r} has {base.nics_per_node} NICs for {base.gpus_per_node} GPUs; "
                          f"with cluster.gpus_per_node = {gpus_per_node} that is not a whole number of NICs: "
                          f"give cluster.nics_per_node")
    return nics


def _renamed_errors(build: Callable[[], ClusterSpec]) -> ClusterSpec:
    """Report a dataclass field error under the scenario key the user wrote."""
    try:
        return build()
    except ConfigError as e:
        attr = e.field.removeprefix("cluster.")
        for key, (field, _) in _SCALED_KEYS.items():
            if field == attr:
                raise ConfigError(f"cluster.{key}", e.message) from None
        raise
