"""The interface between "how long does an operator take" and everything that uses it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from trainsim.operators.ops import Collective, Direction, Op


@runtime_checkable
class DurationModel(Protocol):
    """Seconds per operator and per collective, asked in batches.

    Implementations (calibrated regressors, rooflines) live in ``calibration/``;
    the simulator asks once per distinct operator before it runs.
    Returned arrays are finite and non-negative, one entry per input.
    """

    name: str

    def op_seconds(self, ops: Sequence[Op], direction: Direction) -> np.ndarray: ...

    def collective_seconds(self, colls: Sequence[Collective]) -> np.ndarray: ...
