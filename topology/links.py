"""Typed link ids: the tier of a link and the node and GPU or NIC it belongs to.

A :class:`LinkId` is built from its fields by :meth:`LinkId.nvlink`, :meth:`LinkId.nic`,
:meth:`LinkId.leaf` and :meth:`LinkId.spine` (the link model makes every id once) and read
through them (``link.tier``, ``link.node``, ``link.gpu``, ``link.nic_index``); nothing parses
its text. It *is* also that text (a ``str`` subclass: ``"nvlink:<rank>"``, ``"nic:<node>.<i>"``,
``"leaf:<group>"`` or ``"leaf:<group>.<rail>"``, ``"spine:<pod>"``, see :mod:`topology.graph`), so

* it hashes and compares as the string: dicts keyed by link ids are as fast as with plain
  strings (the network model looks them up millions of times) and a caller may still look
  a link up by its text (``capacities["nic:0.3"]``);
* ``str(link)``, Perfetto track names and JSON output are the text the ids always had.

:meth:`LinkId.parse` turns text back into an id, for callers that hold only the text.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class LinkTier(str, Enum):
    """Where a link sits: a GPU's NVLink port into the NVSwitch, a NIC into the fabric, a leaf
    switch's aggregate uplink into the spines, or a pod's aggregate uplink into the core
    (the last two only in a fat-tree fabric, :mod:`topology.fabric`)."""

    NVLINK = "nvlink"
    NIC = "nic"
    LEAF = "leaf"
    SPINE = "spine"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class LinkId(str):
    """One full-duplex link port (see module doc); immutable, hashable, equal to its text.

    ``tier``: :class:`LinkTier`; ``node``: the node it is on (-1 for the fabric, or when parsed
    from an NVLink port's text, which does not name it; the rail group of a leaf uplink, the pod
    of a spine uplink); ``number``: the GPU rank of an NVLink port, the NIC's index on its node
    for a NIC, the rail of a rail-optimised leaf (-1 otherwise, and for a spine uplink)
    (``gpu`` and ``nic_index`` give the one that applies).
    """

    tier: LinkTier
    node: int
    number: int

    def __new__(cls, text: str, tier: LinkTier, node: int, number: int) -> LinkId:
        self = super().__new__(cls, text)
        object.__setattr__(self, "tier", tier)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "number", number)
        return self

    @classmethod
    def nvlink(cls, rank: int, node: int) -> LinkId:
        """The NVLink port of GPU ``rank`` (on ``node``)."""
        return cls(f"nvlink:{rank}", LinkTier.NVLINK, node, rank)

    @classmethod
    def nic(cls, node: int, index: int) -> LinkId:
        """NIC ``index`` of ``node``."""
        return cls(f"nic:{node}.{index}", LinkTier.NIC, node, index)

    @classmethod
    def leaf(cls, group: int, rail: int) -> LinkId:
        """The aggregate uplink of the leaf of rail group ``group`` (rail ``rail`` of it when the
        fabric is rail-optimised, -1 when the group's nodes share one leaf)."""
        text = f"leaf:{group}.{rail}" if rail >= 0 else f"leaf:{group}"
        return cls(text, LinkTier.LEAF, group, rail)

    @classmethod
    def spine(cls, pod: int) -> LinkId:
        """The aggregate uplink of pod ``pod`` into the core of a 3-level fat tree."""
        return cls(f"spine:{pod}", LinkTier.SPINE, pod, -1)

    @classmethod
    def parse(cls, text: str) -> LinkId:
        """The id a link's text names; ``KeyError`` when it names none."""
        if isinstance(text, LinkId):
            return text
        head, _, rest = str(text).partition(":")
        try:
            if head == "nvlink" and rest.isdigit():
                # The node is not in the text; -1 says "unknown" (the link model's own ids carry it).
                return cls(str(text), LinkTier.NVLINK, -1, int(rest))
            if head == "nic":
                node, _, i = rest.partition(".")
                if node.isdigit() and i.isdigit():
                    return cls.nic(int(node), int(i))
            if head == "leaf":
                group, dot, rail = rest.partition(".")
                if group.isdigit() and (not dot or rail.isdigit()):
                    return cls.leaf(int(group), int(rail) if dot else -1)
            if head == "spine" and rest.isdigit():
                return cls.spine(int(rest))
            if text == "fabric":
                return FABRIC
        except ValueError:  # pragma: no cover - isdigit() guards int()
            pass
        raise KeyError(f"not a link id: {text!r}")

    @property
    def gpu(self) -> int | None:
        """The GPU rank of an NVLink port (None for a NIC)."""
        return self.number if self.tier is LinkTier.NVLINK else None

    @property
    def nic_index(self) -> int | None:
        """The NIC's index on its node (None for an NVLink port)."""
        return self.number if self.tier is LinkTier.NIC and self.node >= 0 else None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"LinkId is immutable (tried to set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"LinkId is immutable (tried to delete {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (LinkId, (str(self), self.tier, self.node, self.number))


#: The fabric between NICs: a NIC-tier link id no preset models (full bisection bandwidth).
FABRIC = LinkId("fabric", LinkTier.NIC, -1, -1)


def tier_of(link: str) -> LinkTier | None:
    """Tier of a link given as a :class:`LinkId` or as its text; None when the text names no link."""
    if isinstance(link, LinkId):
        return link.tier
    try:
        return LinkId.parse(link).tier
    except KeyError:
        return None
