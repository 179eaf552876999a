"""The perturbation hook of a simulation run (jitter, or a test's own).

A perturbation is *configuration*; a run binds it to its generator once
(``perturb.bind(rng)``) and gets a :class:`RunPerturbation` that owns whatever per-run state
it needs (random streams, which ranks straggle). The engine calls only the bound object.

A perturbation without ``bind`` (:class:`Perturbation`: its methods take the run's
generator as a last argument) is bound by :func:`bind_perturbation` to an adapter that
passes the run's generator on each call, in the order the run makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import simpy

from trainsim.sim.kinds import TrafficKind
from trainsim.topology.links import LinkTier

#: A SimPy process body.
Process = Generator[simpy.Event, Any, Any]


class NetworkLike(Protocol):
    """What a perturbation's processes may use of :class:`sim.network.Network`."""

    @property
    def nominal(self) -> Mapping[str, float]: ...

    def set_capacity(self, link: str, bytes_per_s: float) -> None: ...

    def set_capacities(self, changes: dict[str, float]) -> None: ...


class RunPerturbation(Protocol):
    """A perturbation bound to one run: multiplies durations, may run congestion processes."""

    def compute_factor(self, stage: int, replica: int) -> float: ...

    def comm_factor(self, kind: TrafficKind, tier: LinkTier, nbytes: float = 0.0) -> float: ...

    def processes(self, env: simpy.Environment, network: Any) -> list[Process]: ...


@runtime_checkable
class BindablePerturbation(Protocol):
    """A perturbation configuration that makes its per-run state itself (e.g. :class:`sim.jitter.Jitter`)."""

    def bind(self, rng: np.random.Generator, lockstep: int = 1) -> RunPerturbation: ...


class Perturbation(Protocol):
    """A perturbation whose methods take the run's generator (kept for simple hooks and tests)."""

    def compute_factor(self, stage: int, replica: int, rng: np.random.Generator) -> float: ...

    def comm_factor(self, kind: str, tier: str, rng: np.random.Generator) -> float: ...

    def processes(self, env: simpy.Environment, network: Any, rng: np.random.Generator) -> list[Any]: ...


AnyPerturbation = BindablePerturbation | Perturbation


class _WithGenerator:
    """Binds a :class:`Perturbation` to one run's generator."""

    __slots__ = ("_compute", "_comm", "_processes", "rng")

    def __init__(self, perturb: Perturbation, rng: np.random.Generator) -> None:
        self._compute: Callable[[int, int, np.random.Generator], float] = perturb.compute_factor
        self._comm: Callable[[str, str, np.random.Generator], float] = perturb.comm_factor
        self._processes = perturb.processes
        self.rng = rng

    def compute_factor(self, stage: int, replica: int) -> float:
        return self._compute(stage, replica, self.rng)

    def comm_factor(self, kind: TrafficKind, tier: LinkTier, nbytes: float = 0.0) -> float:
        # a generator-taking hook prices a transfer whatever its size: nbytes is not passed on
        return self._comm(kind, tier, self.rng)

    def processes(self, env: simpy.Environment, network: Any) -> list[Process]:
        return list(self._processes(env, network, self.rng))


def bind_perturbation(perturb: AnyPerturbation, rng: np.random.Generator, lockstep: int = 1) -> RunPerturbation:
    """``perturb`` bound to one run whose generator is ``rng`` (see module doc); ``lockstep``: the GPUs
    that one (stage, replica) stands for (mp x cp), for a perturbation that draws per GPU."""
    if isinstance(perturb, BindablePerturbation):
        return perturb.bind(rng, lockstep)
    return _WithGenerator(perturb, rng)
