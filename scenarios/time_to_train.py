"""How long a whole training run takes: ``--train-tokens``.

A planner books an allocation for a number of tokens, not for one iteration. The run is
``ceil(tokens / tokens per iteration)`` iterations of the predicted (or simulated, or jittered
mean) iteration time, on the scenario's GPUs and nodes. What it leaves out, and says so: the
steady state only (no warm-up or compilation, checkpoint saves, evaluation, restarts after
failures, or a changing batch size or sequence length over the run).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from trainsim.operators.errors import ConfigError

#: suffixes a token count may carry (decimal, as model cards write them: 15T = 15e12)
TOKEN_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
#: more than any run will see (a thousand times the largest published corpus), and small enough that the
#: iteration count stays an exact integer in a float
MAX_TOKENS = 1e18
LEFT_OUT = "steady-state iterations only: no warm-up, checkpoint saves, evaluation or restarts"
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]?)\s*$")


def parse_token_count(text: str, field: str = "--train-tokens") -> float:
    """A positive number of tokens: ``2e12``, ``2T``, ``300B``, ``1.5t`` (K, M, B or G, T: powers of 1,000)."""
    m = _COUNT.match(str(text))
    if m is None or m.group(2).lower() not in TOKEN_SUFFIXES:
        raise ConfigError(field, f"expected a number of tokens such as 2e12, 2T or 300B, got {text!r}")
    value = float(m.group(1)) * TOKEN_SUFFIXES[m.group(2).lower()]
    if not (math.isfinite(value) and 1 <= value <= MAX_TOKENS):
        raise ConfigError(field, f"must be between 1 and {MAX_TOKENS:g} tokens, got {text!r}")
    return value


@dataclass(frozen=True)
class TimeToTrain:
    """A run of ``tokens`` tokens at ``iteration_s`` per iteration of ``tokens_per_iteration``."""

    tokens: float
    tokens_per_iteration: int
    iteration_s: float
    gpus: int
    gpus_per_node: int
    basis: str  # which iteration time: "simulated", "Eq. 7", "jittered mean"

    def __post_init__(self) -> None:
        if not (isinstance(self.tokens, int | float) and 1 <= self.tokens <= MAX_TOKENS):  # NaN fails too
            raise ConfigError("tokens", f"must be between 1 and {MAX_TOKENS:g} tokens, got {self.tokens!r}")
        if not (self.tokens_per_iteration >= 1 and self.gpus >= 1 and self.gpus_per_node >= 1):
            raise ConfigError("scenario", "a run needs tokens per iteration, GPUs and GPUs per node of at least 1")
        if not (math.isfinite(self.iteration_s) and self.iteration_s > 0):
            raise ConfigError("iteration_s", f"must be a positive time, got {self.iteration_s!r}")

    @property
    def iterations(self) -> int:
        """Whole iterations: the last one runs in full even if it needs only part of its batch."""
        return math.ceil(self.tokens / self.tokens_per_iteration)

    @property
    def seconds(self) -> float:
        return self.iterations * self.iteration_s

    @property
    def days(self) -> float:
        return self.seconds / 86400.0

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.seconds / 3600.0

    @property
    def node_hours(self) -> float:
        return self.nodes * self.seconds / 3600.0

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "tokens_per_iteration": self.tokens_per_iteration,
                "iterations": self.iterations, "iteration_s": self.iteration_s, "basis": self.basis,
                "seconds": self.seconds, "days": self.days, "gpus": self.gpus, "nodes": self.nodes,
                "gpu_hours": self.gpu_hours, "node_hours": self.node_hours, "left_out": LEFT_OUT}

    def text(self) -> str:
        """Two lines for a command's table."""
        return (f"time to train {_count(self.tokens)} tokens  {_duration(self.seconds)}: {self.iterations:,} "
                f"iterations of {_count(self.tokens_per_iteration)} tokens at the {self.basis} time\n"
                f"  {self.gpu_hours:,.0f} GPU-hours on {self.gpus:,} GPUs ({self.node_hours:,.0f} node-hours on "
                f"{self.nodes:,} nodes); {LEFT_OUT}")


def time_to_train(scenario: Any, iteration_s: float, tokens: float | str, basis: str) -> TimeToTrain:
    """The run of ``tokens`` tokens (a number, or text such as ``"2T"``) of ``scenario`` (a
    :class:`scenarios.schema.Scenario`)."""
    if isinstance(tokens, str):
        tokens = parse_token_count(tokens, "tokens")
    return TimeToTrain(tokens=tokens, tokens_per_iteration=scenario.tokens_per_iteration, iteration_s=iteration_s,
                       gpus=scenario.gpus, gpus_per_node=scenario.cluster.gpus_per_node, basis=basis)


def _count(n: float) -> str:
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:,.0f}"


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:,.1f} minutes"
    return f"{seconds:,.1f} s"
