"""A roofline duration model: the fallback when no samples exist for a GPU.

``time = launch + max(flops / (peak * compute_efficiency), bytes / (bw * memory_efficiency))``
with the FLOP and byte counts of :mod:`operators.ops`. The default efficiencies
(70% of peak tensor FLOP/s, 80% of peak memory bandwidth) and the 5 us launch
overhead are *assumptions* typical of large fp16 GEMMs and streaming kernels, not
measurements; small, attention-shaped or fused kernels typically run well below
them, so a roofline profile under-predicts. Collectives are left to the
topology's closed forms (NaN here, 0 for one rank).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainsim.operators.errors import ConfigError, require_positive
from trainsim.operators.ops import Collective, Direction, Op, bytes_moved, flops


class RooflineProfile:
    """Analytic :class:`operators.duration.DurationModel` from peak FLOP/s and memory bandwidth."""

    def __init__(self, name: str, peak_flops: float, mem_bw: float, compute_efficiency: float = 0.7,
                 memory_efficiency: float = 0.8, launch_s: float = 5e-6) -> None:
        require_positive("roofline.peak_flops", peak_flops)
        require_positive("roofline.mem_bw", mem_bw)
        for field, eff in (("roofline.compute_efficiency", compute_efficiency),
                           ("roofline.memory_efficiency", memory_efficiency)):
            if not 0 < eff <= 1:
                raise ConfigError(field, f"must be in (0, 1], got {eff!r}")
        if not launch_s >= 0:
            raise ConfigError("roofline.launch_s", f"must be >= 0, got {launch_s!r}")
        self.name = name
        self.peak_flops = float(peak_flops)
        self.mem_bw = float(mem_bw)
        self.compute_efficiency = float(compute_efficiency)
        self.memory_efficiency = float(memory_efficiency)
        self.launch_s = float(launch_s)

    def op_seconds(self, ops: Sequence[Op], direction: Direction) -> np.ndarray:
        direction = Direction(direction)
        out = np.empty(len(ops))
        for i, op in enumerate(ops):
            if (direction is Direction.UPDATE) != op.kind.is_optimizer:
                raise ConfigError("profile", f"roofline profile '{self.name}' has no {direction.value} "
                                             f"duration for operator {op.kind.value}")
            if op.kind.value.startswith("fp8_"):
                raise ConfigError("profile", f"roofline profile '{self.name}' has no FP8 rate (its peak is the "
                                             f"bf16 datasheet figure); training.precision fp8 needs a profile "
                                             f"with FP8 samples, e.g. h100-sxm-bf16")
            compute = flops(op, direction) / (self.peak_flops * self.compute_efficiency)
            memory = bytes_moved(op, direction) / (self.mem_bw * self.memory_efficiency)
            out[i] = self.launch_s + max(compute, memory)
        return out

    def collective_seconds(self, colls: Sequence[Collective]) -> np.ndarray:
        return np.array([0.0 if c.ranks == 1 or c.entries == 0 else np.nan for c in colls], dtype=float)

    def selection_report(self) -> list[dict]:
        return []

    def __repr__(self) -> str:
        return (f"RooflineProfile({self.name!r}, peak_flops={self.peak_flops:g}, mem_bw={self.mem_bw:g}, "
                f"compute_efficiency={self.compute_efficiency}, memory_efficiency={self.memory_efficiency})")
