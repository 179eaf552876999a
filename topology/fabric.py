"""The fabric beyond the NICs: full bisection bandwidth, or a leaf/spine (fat-tree) network.

A :class:`FabricSpec` describes the switch network the NICs plug into (see ``docs/fabric.md``):

* ``full_bisection`` (the default): the fabric is never a bottleneck and has no links of its own;
  every answer is what it was before fabrics existed.
* ``fat_tree``: nodes sit under leaf switches of ``nodes_per_leaf`` nodes (a *rail group*, NVIDIA's
  "scalable unit"); each leaf has one aggregate uplink port into the spine layer of capacity
  ``NICs below it * nic_bw / oversubscription``. With ``levels: 3`` the leaves form pods of
  ``nodes_per_pod`` nodes whose spines have one aggregate uplink into the core, of capacity
  ``NICs below the pod * nic_bw / (oversubscription * spine_oversubscription)``.
* ``rail_optimized``: NIC ``i`` of every node of a rail group plugs into that group's leaf ``i``
  (one leaf per rail), so traffic between equal-index NICs of one rail group never leaves its
  leaf; otherwise all NICs of a node go to the node's leaf.

ECMP is modelled as perfect spreading: the spine links above a leaf are one aggregate port, and a
flow through it gets any share of its capacity. The job is placed from a leaf (and pod) boundary,
alone on the fabric; a leaf the job fills only partly still has the uplinks of a full leaf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum

from trainsim.operators.errors import ConfigError, check_keys, check_number, require_int, show


class FabricKind(str, Enum):
    """What the fabric beyond the NICs is."""

    FULL_BISECTION = "full_bisection"
    FAT_TREE = "fat_tree"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FabricSpec:
    """The switch network the NICs plug into (see module doc); validated on construction.

    Fields other than ``kind`` describe a fat tree and must keep their defaults for
    ``full_bisection`` (so that a fabric cannot claim an oversubscription it does not model).
    """

    kind: FabricKind = FabricKind.FULL_BISECTION
    levels: int = 2
    nodes_per_leaf: int | None = None
    oversubscription: float = 1.0
    rail_optimized: bool = False
    nodes_per_pod: int | None = None  # levels 3 only
    spine_oversubscription: float = 1.0  # levels 3 only

    def __post_init__(self) -> None:
        try:
            kind = FabricKind(self.kind)
        except ValueError:
            raise ConfigError("cluster.fabric.kind", f"unknown fabric kind {show(self.kind)}; known: "
                                                     f"{', '.join(k.value for k in FabricKind)}") from None
        object.__setattr__(self, "kind", kind)
        if not isinstance(self.rail_optimized, bool):
            raise ConfigError("cluster.fabric.rail_optimized",
                              f"must be true or false, got {show(self.rail_optimized)}")
        check_number("cluster.fabric.oversubscription", self.oversubscription, minimum=1.0)
        check_number("cluster.fabric.spine_oversubscription", self.spine_oversubscription, minimum=1.0)
        require_int("cluster.fabric.levels", self.levels, minimum=2, maximum=3,
                    reason="a fat tree here has 2 (leaf/spine) or 3 (leaf/spine/core) levels")
        if kind is FabricKind.FULL_BISECTION:
            for f in fields(self):
                if f.name != "kind" and getattr(self, f.name) != f.default:
                    raise ConfigError(f"cluster.fabric.{f.name}", "only for cluster.fabric.kind = fat_tree "
                                                                  "(a full-bisection fabric has no switch levels)")
            return
        if self.nodes_per_leaf is None:
            raise ConfigError("cluster.fabric.nodes_per_leaf", "required for a fat_tree fabric")
        require_int("cluster.fabric.nodes_per_leaf", self.nodes_per_leaf)
        if self.levels == 2:
            if self.nodes_per_pod is not None:
                raise ConfigError("cluster.fabric.nodes_per_pod", "only for cluster.fabric.levels = 3")
            if self.spine_oversubscription != 1.0:
                raise ConfigError("cluster.fabric.spine_oversubscription", "only for cluster.fabric.levels = 3")
            return
        if self.nodes_per_pod is None:
            raise ConfigError("cluster.fabric.nodes_per_pod", "required for a 3-level fat tree")
        require_int("cluster.fabric.nodes_per_pod", self.nodes_per_pod)
        if self.nodes_per_pod % self.nodes_per_leaf or self.nodes_per_pod == self.nodes_per_leaf:
            raise ConfigError("cluster.fabric.nodes_per_pod",
                              f"must be a multiple (at least 2x) of cluster.fabric.nodes_per_leaf = "
                              f"{self.nodes_per_leaf} (a pod is whole leaves), got {self.nodes_per_pod}")

    @property
    def has_links(self) -> bool:
        """Whether the fabric has links of its own (a fat tree) or none (full bisection)."""
        return self.kind is FabricKind.FAT_TREE

    def leaf(self, node: int, nic_index: int) -> tuple[int, int]:
        """(rail group, rail) of the leaf NIC ``nic_index`` of ``node`` plugs into; rail -1 when the
        fabric is not rail-optimised (the node's NICs share one leaf)."""
        assert self.nodes_per_leaf is not None, "leaf() of a full-bisection fabric"
        group = node // self.nodes_per_leaf
        return (group, nic_index) if self.rail_optimized else (group, -1)

    def pod(self, node: int) -> int:
        """The pod of ``node`` (levels 3); every node is in pod 0 of a 2-level tree."""
        return node // self.nodes_per_pod if self.nodes_per_pod is not None else 0

    def leaf_uplink_bw(self, nics_per_node: int, nic_bw: float) -> float:
        """Bytes/s per direction of one leaf's aggregate uplink: its NICs' line rate over the ratio."""
        assert self.nodes_per_leaf is not None
        nics = self.nodes_per_leaf * (1 if self.rail_optimized else nics_per_node)
        return nics * nic_bw / self.oversubscription

    def pod_uplink_bw(self, nics_per_node: int, nic_bw: float) -> float:
        """Bytes/s per direction of one pod's aggregate uplink into the core (levels 3)."""
        assert self.nodes_per_pod is not None
        return self.nodes_per_pod * nics_per_node * nic_bw / (self.oversubscription * self.spine_oversubscription)

    def describe(self) -> str:
        """One line for reports and docs."""
        if not self.has_links:
            return "full bisection"
        rail = "rail-optimised" if self.rail_optimized else "node-per-leaf"
        text = f"{self.levels}-level fat tree, {self.nodes_per_leaf} nodes/leaf, {rail}, {self.oversubscription:g}:1"
        if self.levels == 3:
            text += f", {self.nodes_per_pod} nodes/pod, spine {self.spine_oversubscription:g}:1"
        return text


FULL_BISECTION = FabricSpec()

_KEYS = tuple(f.name for f in fields(FabricSpec))


def fabric_from_mapping(d: object, base: FabricSpec = FULL_BISECTION) -> FabricSpec:
    """A fabric from a scenario's ``cluster.fabric`` mapping, on top of the preset's ``base``.

    Keys: ``kind`` (full_bisection | fat_tree), ``levels`` (2 | 3), ``nodes_per_leaf``,
    ``oversubscription`` (>= 1), ``rail_optimized`` (bool), ``nodes_per_pod`` and
    ``spine_oversubscription`` (levels 3). Keys not given keep the preset's values, unless ``kind``
    changes: then the other keys start from their defaults (a preset's leaf size says nothing about
    a fabric of another kind). A bare string is taken as the kind.
    """
    if isinstance(d, str):
        d = {"kind": d}
    if not isinstance(d, Mapping):
        raise ConfigError("cluster.fabric", f"expected a mapping (kind, nodes_per_leaf, ...), got {show(d)}")
    check_keys("cluster.fabric", d, _KEYS)
    values: dict[str, object] = {}
    if "kind" in d:
        kind = d["kind"]
        if not isinstance(kind, str) or kind not in {k.value for k in FabricKind}:
            raise ConfigError("cluster.fabric.kind", f"unknown fabric kind {show(kind)}; known: "
                                                     f"{', '.join(k.value for k in FabricKind)}")
        values["kind"] = FabricKind(kind)
    if values.get("kind", base.kind) is base.kind:
        start = {f.name: getattr(base, f.name) for f in fields(FabricSpec)}
    else:
        start = {}
    start.update(values)
    for key in _KEYS:
        if key != "kind" and key in d:
            start[key] = d[key]
    return FabricSpec(**start)
