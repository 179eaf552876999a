"""Which departures from Eq. 7 a run simulates (see :mod:`sim.engine`; ``compare`` switches them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainsim.sim.kinds import SimMode


@dataclass(frozen=True)
class SimOptions:
    """Which departures from Eq. 7 are simulated (all off: ideal; all on: realistic)."""

    own_stage_times: bool = True  # False: every slot is Max_Fwd / Max_Bwd (comm inside)
    p2p_transfers: bool = True  # P2P as a blocking transfer instead of sender compute
    bucketed_dp: bool = True  # bucketed DP collective of all replicas instead of AR_s after the last B
    contention: bool = True  # transfers share links (max-min fair) instead of plain delays
    # Gradient buckets become ready during the last backward (Megatron-LM's overlap_grad_reduce)
    # instead of after it (DeepSpeed's pipeline engine, GPT-NeoX: the paper's framework).
    overlap_dp: bool = False
    # Compute and a DP all-reduce running at once on a GPU slow each other, by the profile's
    # measured factors (sim.costs.StageCost.interference_*); no effect without them.
    interference: bool = True
    # A pipeline stage whose host issues its schedule ahead (sim.costs.StageCost.host_ahead) keeps a
    # host clock of its own instead of Eq. 7's per-step host excess; needs own_stage_times.
    host_clock: bool = True


IDEAL = SimOptions(False, False, False, False, interference=False, host_clock=False)
REALISTIC = SimOptions(True, True, True, True, interference=True, host_clock=True)
SWITCHES = ("own_stage_times", "p2p_transfers", "bucketed_dp", "contention", "interference", "host_clock")


def options_for(mode: SimMode, overlap_dp: bool = False) -> SimOptions:
    """The switches of a mode."""
    return IDEAL if mode is SimMode.IDEAL else dataclasses.replace(REALISTIC, overlap_dp=overlap_dp)


def label(o: SimOptions) -> SimMode | str:
    """The mode a set of switches is, or ``custom:<switches on>``."""
    if o == IDEAL:
        return SimMode.IDEAL
    if dataclasses.replace(o, overlap_dp=False) == REALISTIC:
        return SimMode.REALISTIC
    on = [k for k in SWITCHES if getattr(o, k)]
    return "custom:" + "+".join(on)
