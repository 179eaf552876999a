"""A duration model for simulation tests: FLOPs at 150 TFLOP/s plus bytes at 1.5 TB/s, collectives by
the topology's closed form. Cheap, deterministic and free of any fitted profile."""

from __future__ import annotations

import math

import numpy as np

from trainsim.operators.ops import bytes_moved, flops


class Analytic:
    name = "analytic"

    def op_seconds(self, ops, direction):
        return np.array([flops(o, direction) / 150e12 + bytes_moved(o, direction) / 1.5e12 for o in ops])

    def collective_seconds(self, colls):
        return np.full(len(colls), math.nan)  # closed form
