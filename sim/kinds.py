"""The simulation's vocabularies as ``str``-valued enums.

Each member *is* its value (``TrafficKind.MP == "mp"``, same hash), so dict keys such as
``SimResult.exposed``'s, JSON output and comparisons with plain strings keep working;
``str()`` and f-strings give the value.
"""

from __future__ import annotations

from enum import Enum

from trainsim.topology.links import LinkTier

__all__ = ["LinkTier", "SimMode", "TrafficKind"]


class TrafficKind(str, Enum):
    """What a transfer carries: MP all-reduces, the CP ring's K/V chunks, P2P activations/gradients, DP
    gradient sync, ZeRO-1 all-gather."""

    MP = "mp"
    CP = "cp"
    PP = "pp"
    DP_ALLREDUCE = "dp_allreduce"
    DP_ALLGATHER = "dp_allgather"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class SimMode(str, Enum):
    """``realistic``: every departure from Eq. 7 simulated; ``ideal``: Eq. 7's assumptions."""

    REALISTIC = "realistic"
    IDEAL = "ideal"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
