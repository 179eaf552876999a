"""The roofline profile: a GPU's datasheet bound times efficiencies learned on a measured GPU.

``time = max(launch, max(flops / peak, bytes / mem_bw) * slowdown[operator, direction])`` with the FLOP
and byte counts of :mod:`operators.ops` and the GPU's dense peaks (FP8 GEMM kinds against the FP8
peak). ``slowdown`` is not an assumption: it is the median measured / roofline time of each
operator's largest shapes on the shipped measured profile (``calibration/profiles/
roofline_efficiency.json``, written by ``python -m trainsim.calibration.efficiency``; the rule is in
:func:`calibration.efficiency.saturated_slowdowns`), and ``launch`` that profile's measured launch
floor. One number per operator, whatever the shape: small shapes, which run further from the bound,
are priced too fast; ``transfer:<gpu>`` uses the shape-dependent efficiency models instead.
Collectives are left to the topology's closed forms (NaN here, 0 for one rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsim.calibration.efficiency import Roofline, load_roofline_table
from trainsim.operators.errors import ConfigError, require_positive
from trainsim.operators.ops import Collective, Direction, Op


class RooflineProfile:
    """Analytic :class:`operators.duration.DurationModel` from a GPU's peaks and learned slowdowns."""

    def __init__(self, name: str, peak_flops: float, mem_bw: float, peak_fp8: float = 0.0,
                 slowdowns: Mapping[str, float] | None = None, launch_s: float | None = None) -> None:
        require_positive("roofline.peak_flops", peak_flops)
        require_positive("roofline.mem_bw", mem_bw)
        if slowdowns is None or launch_s is None:
            table = load_roofline_table()
            slowdowns = table["slowdowns"] if slowdowns is None else slowdowns
            launch_s = table["launch_s"] if launch_s is None else launch_s
            self.learned_from = f"{table.get('source')} ({table.get('gpu')})"
        else:
            self.learned_from = "given"
        for key, value in slowdowns.items():
            if not (np.isfinite(value) and value > 0):
                raise ConfigError("roofline.slowdowns", f"{key}: must be a positive number, got {value!r}")
        self.name = name
        self.bound = Roofline(name, float(peak_flops), float(peak_fp8), float(mem_bw), float(launch_s))
        self.slowdowns = dict(slowdowns)

    @property
    def peak_flops(self) -> float:
        return self.bound.peak_flops

    @property
    def mem_bw(self) -> float:
        return self.bound.mem_bw

    @property
    def launch_s(self) -> float:
        return self.bound.launch_s

    def op_seconds(self, ops: Sequence[Op], direction: Direction) -> np.ndarray:
        direction = Direction(direction)
        out = np.empty(len(ops))
        for i, op in enumerate(ops):
            if (direction is Direction.UPDATE) != op.kind.is_optimizer:
                raise ConfigError("profile", f"roofline profile '{self.name}' has no {direction.value} "
                                             f"duration for operator {op.kind.value}")
            slowdown = self.slowdowns.get(f"{op.kind.value}:{direction.value}")
            if slowdown is None:
                raise ConfigError("profile", f"roofline profile '{self.name}' has no learned efficiency for operator "
                                             f"{op.kind.value} ({direction.value})")
            if op.kind.value.startswith("fp8_linear") and self.bound.peak_fp8 <= 0:
                raise ConfigError("profile", f"roofline profile '{self.name}': the GPU has no FP8 rate on its "
                                             f"datasheet; training.precision fp8 needs a GPU with FP8 tensor cores")
            # the slowdown is that of large shapes: it scales the work's bound, not the launch floor
            out[i] = max(self.bound.launch_s, self.bound.work_seconds(op, direction) * slowdown)
        return out

    def collective_seconds(self, colls: Sequence[Collective]) -> np.ndarray:
        return np.array([0.0 if c.ranks == 1 or c.entries == 0 else np.nan for c in colls], dtype=float)

    def selection_report(self) -> list[dict]:
        return []

    def __repr__(self) -> str:
        return (f"RooflineProfile({self.name!r}, peak_flops={self.peak_flops:g}, mem_bw={self.mem_bw:g}, "
                f"peak_fp8={self.bound.peak_fp8:g}, learned from {self.learned_from})")
