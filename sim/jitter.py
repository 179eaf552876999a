"""Jitter: seeded, composable perturbations of a simulated iteration (off by default).

Configured under ``simulation.jitter`` in a scenario (every key also via
``--set simulation.jitter.<path>=value``)::

    simulation:
      jitter:
        preset: vista-busy         # optional: a preset of sim.jitter_presets; explicit keys override it
        noise:                     # per message on a link tier: the machine, not the layout
          nic:                     # link tier: nic (inter-node) or nvlink (intra-node)
            sigma: 0.25            # dimensionless, per message; factor = exp(N(-sigma^2/2, sigma)), E[factor] = 1
            message_bytes: 524288  # optional: bytes of one message (NCCL Simple protocol's step: 4 MiB / 8)
            kinds: {mp: 0.3}       # optional per traffic kind: mp, pp, dp_allreduce, dp_allgather (dp = both)
            tail:                  # optional heavy tail: with this probability per transfer, the factor is
              probability: 0.001   #   multiplied by a Pareto(alpha) draw >= 1
              alpha: 2.0
          nvlink: {sigma: 0.02}
        congestion:                # on/off episodes per link of a tier (alternating exponential durations)
          nic:
            bandwidth_factor: 0.3  # in (0, 1]: capacity multiplier while an episode is on
            mean_on_s: 2.0         # seconds, mean episode length
            mean_off_s: 18.0       # seconds, mean gap between episodes
            scope: link            # link: independent per link; tier: all links of the tier at once
        compute:
          sigma: 0.01              # lognormal noise on every compute timeout (mean-preserving, dimensionless)
          iteration_sigma: 0.004   # each GPU's speed for one iteration: one mean-1 lognormal per GPU and
                                   #   iteration; a (stage, replica) runs at its slowest GPU's (mp x cp)
          stragglers:
            probability: 0.02      # in [0, 1]: chance per iteration that a (stage, replica) is a straggler
            slowdown: 1.15         # >= 1: compute-time multiplier of a straggler for the whole iteration

:class:`Jitter` is the simulation engine's ``perturb`` hook: ``compute_factor``,
``comm_factor`` and ``processes`` (see :mod:`sim.perturb`): a run binds it to its generator
(:meth:`Jitter.bind`), which gives a :class:`RunJitter` owning the run's random streams
(:class:`sim.streams.RunStreams`). They are independent child streams derived from that
generator's seed sequence (no draws are taken from the generator itself), one per purpose —
noise per (kind, tier), stragglers and GPU speeds per (stage, replica), compute noise, congestion
per link.
Keyed streams keep *common random numbers* across parameter values (a link's episode sequence
does not depend on what the rest of the run did), which the ablation in
:mod:`scenarios.montecarlo` and ``trainsim jitter fit`` rely on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trainsim.sim.kinds import TrafficKind
from trainsim.sim.streams import NormalStream, RunStreams
from trainsim.topology.links import LinkTier, tier_of

# Plain strings (the configuration's vocabulary, YAML- and JSON-ready), from the enums.
TIERS: tuple[str, ...] = tuple(t.value for t in LinkTier)
KINDS: tuple[str, ...] = tuple(k.value for k in TrafficKind)
KIND_ALIASES = {"dp": (TrafficKind.DP_ALLREDUCE.value, TrafficKind.DP_ALLGATHER.value)}
#: Sources of variance the Monte Carlo ablation switches on one at a time.
SOURCES = ("mp", "pp", "dp", "tail", "compute", "congestion")
SOURCE_KINDS = {"mp": (TrafficKind.MP.value,), "pp": (TrafficKind.PP.value,), "dp": KIND_ALIASES["dp"]}

FIELD = "simulation.jitter"


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class TierNoise:
    """Noise on the messages of one link tier.

    The body is a mean-preserving lognormal factor per *message* (``sigma``; ``kinds`` overrides it
    per traffic kind). A message is what NCCL moves through a link in one pipeline step of its Simple
    protocol: ``message_bytes``, by default its 4 MiB buffer over its 8 steps, 512 KiB. A transfer that
    moves ``B`` bytes through its busiest link is ``n = ceil(B / message_bytes)`` messages one after
    another, each with its own factor, so its time is multiplied by their mean: mean 1, variance
    ``(exp(sigma^2) - 1) / n``. The engine draws that as one lognormal with the same mean and variance
    (Fenton-Wilkinson), ``sigma_n^2 = log(1 + (exp(sigma^2) - 1) / n)``: one draw per transfer. A
    multi-gigabyte gradient all-reduce averages over thousands of messages, a small MP all-reduce
    over a few; a transfer of unknown size (no route) counts as one message.

    The optional heavy tail: with probability ``tail_probability`` per transfer the factor is
    further multiplied by a Pareto(``tail_alpha``) draw >= 1 (a retransmission, an adaptive-routing
    detour, a stalled queue pair): rare, large and not mean-preserving, since such delays add time.
    """

    tier: str
    sigma: float = 0.0
    kinds: tuple[tuple[str, float], ...] = ()
    tail_probability: float = 0.0
    tail_alpha: float = 2.0
    message_bytes: float = 524288.0

    def sigma_for(self, kind: str) -> float:
        return dict(self.kinds).get(kind, self.sigma)


@dataclass(frozen=True)
class Congestion:
    """On/off congestion episodes on the links of ``tier``.

    ``scope="link"``: every link has its own independent process (a hot NIC or cable);
    ``scope="tier"``: one process switches all links of the tier together (fabric-wide
    congestion, e.g. another job saturating the spine switches).
    """

    tier: str
    bandwidth_factor: float
    mean_on_s: float
    mean_off_s: float
    scope: str = "link"
    # Queueing delay an episode adds to each sequential step of a transfer's protocol (a ring
    # all-reduce over n ranks has 2 (n - 1), a P2P send one): rings of more ranks wait through more
    # of them, so a layout's exposure grows with its MP degree (docs/jitter.md). 0: bandwidth only.
    latency_s: float = 0.0

    @property
    def p_on(self) -> float:
        """Stationary probability that an episode is on."""
        return self.mean_on_s / (self.mean_on_s + self.mean_off_s)


@dataclass(frozen=True)
class ComputeJitter:
    """Compute-side variance: of every kernel (``sigma``), of each GPU's speed over an iteration
    (``iteration_sigma``) and stragglers.

    ``sigma`` is drawn per compute timeout and so averages out over an iteration's hundreds of
    kernels. ``iteration_sigma`` is what does not average out: a GPU's speed for a whole iteration
    (its sustained clock under the power cap, its thermal state, host daemons), one mean-1 lognormal
    draw per GPU and iteration. The ``mp x cp`` GPUs of a (stage, replica) synchronise at every
    tensor-parallel collective, so the unit runs at its slowest GPU's speed: the maximum of its GPUs'
    draws. The parameter describes a GPU, and a wider model-parallel group is slower on average.
    """

    sigma: float = 0.0
    straggler_probability: float = 0.0
    straggler_slowdown: float = 1.0
    iteration_sigma: float = 0.0

    @property
    def active(self) -> bool:
        return (self.sigma > 0 or self.iteration_sigma > 0
                or (self.straggler_probability > 0 and self.straggler_slowdown > 1))


@dataclass(frozen=True)
class Jitter:
    """A validated jitter configuration; also the engine's perturb hook (see module doc)."""

    noise: tuple[TierNoise, ...] = ()
    congestion: tuple[Congestion, ...] = ()
    compute: ComputeJitter = field(default_factory=ComputeJitter)
    preset: str | None = None
    #: sigma per (kind, tier), materialised for the hot path
    _sigma: dict[tuple[str, str], float] = field(init=False, repr=False, compare=False)
    #: (tail probability, Pareto alpha) per (kind, tier) where a tail is on
    _tail: dict[tuple[str, str], tuple[float, float]] = field(init=False, repr=False, compare=False)
    #: bytes of one message per tier with noise
    _message: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = {}
        tails = {}
        for tn in self.noise:
            for kind in KINDS:
                s = tn.sigma_for(kind)
                if s > 0:
                    table[(kind, tn.tier)] = s
                if tn.tail_probability > 0:
                    tails[(kind, tn.tier)] = (tn.tail_probability, tn.tail_alpha)
        object.__setattr__(self, "_sigma", table)
        object.__setattr__(self, "_tail", tails)
        object.__setattr__(self, "_message", {tn.tier: tn.message_bytes for tn in self.noise})

    # -- what is on ------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return bool(self._sigma) or bool(self._tail) or bool(self.congestion) or self.compute.active

    def sources(self) -> tuple[str, ...]:
        """The variance sources this configuration switches on (subset of SOURCES)."""
        out = [s for s, kinds in SOURCE_KINDS.items() if any((k, t) in self._sigma for k in kinds for t in TIERS)]
        if self._tail:
            out.append("tail")
        if self.compute.active:
            out.append("compute")
        if self.congestion:
            out.append("congestion")
        return tuple(out)

    def only(self, source: str) -> Jitter | None:
        """The same configuration with only one source of variance left on (None if it is off)."""
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
        if source not in self.sources():
            return None
        if source == "compute":
            return Jitter(compute=self.compute, preset=self.preset)
        if source == "congestion":
            return Jitter(congestion=self.congestion, preset=self.preset)
        if source == "tail":  # the heavy tail of every tier that has one, lognormal bodies off
            return Jitter(noise=tuple(replace(tn, sigma=0.0, kinds=()) for tn in self.noise if tn.tail_probability > 0),
                          preset=self.preset)
        kinds = SOURCE_KINDS[source]
        # the source's kinds at their sigmas, everything else (the tail included) off; the tier's messages kept
        noise = tuple(replace(tn, sigma=0.0, kinds=tuple((k, tn.sigma_for(k)) for k in kinds), tail_probability=0.0,
                              tail_alpha=2.0) for tn in self.noise)
        return Jitter(noise=noise, preset=self.preset)

    def to_mapping(self) -> dict[str, Any]:
        """The explicit scenario mapping (no preset) that parses back to this configuration."""
        out: dict[str, Any] = {}
        if self.noise:
            out["noise"] = {}
            for tn in self.noise:
                entry: dict[str, Any] = {"sigma": tn.sigma}
                if tn.kinds:
                    entry["kinds"] = dict(tn.kinds)
                if tn.tail_probability > 0:
                    entry["tail"] = {"probability": tn.tail_probability, "alpha": tn.tail_alpha}
                if tn.message_bytes != TierNoise.message_bytes:
                    entry["message_bytes"] = tn.message_bytes
                out["noise"][tn.tier] = entry
        if self.congestion:
            out["congestion"] = {
                c.tier: {"bandwidth_factor": c.bandwidth_factor, "mean_on_s": c.mean_on_s, "mean_off_s": c.mean_off_s,
                         "scope": c.scope, **({"latency_s": c.latency_s} if c.latency_s > 0 else {})}
                for c in self.congestion
            }
        cj = self.compute
        if cj != ComputeJitter():
            out["compute"] = {"sigma": cj.sigma, "stragglers": {"probability": cj.straggler_probability,
                                                                "slowdown": cj.straggler_slowdown}}
            if cj.iteration_sigma > 0:
                out["compute"]["iteration_sigma"] = cj.iteration_sigma
        return out

    # -- the perturb hook ------------------------------------------------------------------
    def bind(self, rng: np.random.Generator, lockstep: int = 1) -> RunJitter:
        """This configuration bound to one run whose generator is ``rng`` (what the engine calls);
        ``lockstep``: the GPUs of one (stage, replica), mp x cp (see :class:`ComputeJitter`)."""
        return RunJitter(self, RunStreams(rng), lockstep)

    # One-off factors outside a run (the three-argument hook of sim.perturb.Perturbation). They keep
    # no state between calls: a straggler is decided by the generator's seed, as in a run, and the
    # noise is drawn from the generator itself.
    def comm_factor(self, kind: str, tier: str, rng: np.random.Generator, nbytes: float = 0.0) -> float:
        """Multiplier of one transfer's base duration (``nbytes`` through its busiest link; 0: unknown,
        one message): lognormal with mean 1 (1.0 when off)."""
        sigma = self._sigma.get((kind, tier))
        f = 1.0 if sigma is None else _lognormal(transfer_sigma(sigma, nbytes, self._message[tier]),
                                                 float(rng.standard_normal()))
        tail = self._tail.get((kind, tier))
        if tail is not None:
            f *= _pareto_tail(tail, float(rng.random()))
        return f

    def compute_factor(self, stage: int, replica: int, rng: np.random.Generator) -> float:
        """Multiplier of one compute timeout of (stage, replica): straggler slowdown times noise."""
        return self.bind(rng).compute_factor(stage, replica)

    def processes(self, env: Any, network: Any, rng: np.random.Generator) -> list[Generator[Any, Any, None]]:
        """Congestion on/off processes, one per link of each congested tier (started at t=0)."""
        return self.bind(rng).processes(env, network)


def transfer_sigma(sigma: float, nbytes: float, message_bytes: float) -> float:
    """The lognormal sigma of the mean of ``ceil(nbytes / message_bytes)`` independent per-message
    factors of ``sigma`` (same mean 1 and variance, see :class:`TierNoise`); ``sigma`` for one message."""
    if nbytes <= message_bytes:
        return sigma
    n = math.ceil(nbytes / message_bytes)
    return math.sqrt(math.log1p(math.expm1(sigma * sigma) / n))


def _lognormal(sigma: float, z: float) -> float:
    """exp(N(-sigma^2/2, sigma)) from a standard normal ``z``: mean 1."""
    return math.exp(sigma * z - 0.5 * sigma * sigma)


def _pareto_tail(tail: tuple[float, float], u: float) -> float:
    """The tail multiplier from a uniform ``u`` in [0, 1): Pareto(alpha) >= 1 with probability p, else 1.

    Given u < p, u / p is uniform on (0, 1), so one uniform decides both whether and how much.
    """
    p, alpha = tail
    if u >= p:
        return 1.0
    return (max(u, 1e-300) / p) ** (-1.0 / alpha)


#: What :meth:`RunJitter.comm_factor` keeps per (kind, tier): sigma and its stream's draw, the
#: tail and its stream's draw (None where off), the tier's message bytes, and per transfer size
#: (bytes through the busiest link) the transfer's lognormal (sigma, sigma^2 / 2), computed once.
_CommEntry = tuple[float | None, Callable[[], float] | None, tuple[float, float] | None, Callable[[], float] | None,
                   float, dict[float, tuple[float, float]]]


class RunJitter:
    """A :class:`Jitter` bound to one run: the run's streams and which ranks straggle (see module doc)."""

    __slots__ = ("config", "streams", "lockstep", "_unit", "_noise", "_comm", "_compute_on", "step_latency")

    def __init__(self, config: Jitter, streams: RunStreams, lockstep: int = 1) -> None:
        self.config = config
        self.streams = streams
        self.lockstep = lockstep
        # (stage, replica) -> its compute factor fixed for the run: straggler slowdown x GPU speed
        self._unit: dict[tuple[int, int], float] = {}
        self._noise: dict[tuple[str, str], NormalStream] = {}  # (kind, tier) -> its stream
        # (kind, tier) -> what its factor needs, made on first use (see _comm_entry)
        self._comm: dict[tuple[str, str], _CommEntry] = {}
        self._compute_on = config.compute.active
        # tier -> the delay per protocol step its congestion episode adds now (absent or 0: none);
        # the engine reads it at each transfer's start (sim.processes.comm)
        self.step_latency: dict[str, float] = {}

    def _comm_entry(self, kind: str, tier: str) -> _CommEntry:
        """(sigma, its normal stream's draw, tail, the tail stream's draw) of (kind, tier); None where off."""
        config = self.config
        sigma = config._sigma.get((kind, tier))
        body = None
        if sigma is not None:
            stream = self._noise.get((kind, tier))
            if stream is None:
                # str(): the key's repr seeds the stream, so enum members must not appear in it.
                stream = self._noise[kind, tier] = self.streams.stream(("noise", str(kind), str(tier)))
            body = stream.normal
        tail = config._tail.get((kind, tier)) if config._tail else None
        # Its own keyed stream: switching the tail on leaves the body's draws unchanged.
        tail_draw = self.streams.stream(("tail", str(kind), str(tier))).normal if tail is not None else None
        return sigma, body, tail, tail_draw, config._message.get(tier, TierNoise.message_bytes), {}

    def comm_factor(self, kind: str, tier: str, nbytes: float = 0.0) -> float:
        """Multiplier of one transfer's base duration, the transfer moving ``nbytes`` through its busiest
        link (0: unknown, one message): lognormal with mean 1 over its messages (see
        :class:`TierNoise`), times the tail (1.0 when off)."""
        entry = self._comm.get((kind, tier))
        if entry is None:
            entry = self._comm[kind, tier] = self._comm_entry(kind, tier)
        sigma, body, tail, tail_draw, message, lognormal = entry
        if body is None:
            f = 1.0
        else:
            # a run's transfers come in a few sizes: each size's sigma is computed once
            key = nbytes if nbytes > message else 0.0
            at = lognormal.get(key)
            if at is None:
                assert sigma is not None  # a body stream exists only where a sigma does
                s = transfer_sigma(sigma, key, message)
                at = lognormal[key] = (s, 0.5 * s * s)
            # _lognormal, inlined: the hot path of a jittered run
            f = math.exp(at[0] * body() - at[1])
        if tail_draw is not None:
            f *= _pareto_tail(tail, 0.5 * math.erfc(-tail_draw() / math.sqrt(2.0)))  # type: ignore[arg-type]
        return f

    def compute_factor(self, stage: int, replica: int) -> float:
        """Multiplier of one compute timeout of (stage, replica): straggler slowdown times noise."""
        if not self._compute_on:
            return 1.0
        cj = self.config.compute
        f = self._unit.get((stage, replica))
        if f is None:
            f = self._unit[stage, replica] = self._unit_factor(cj, stage, replica)
        if cj.sigma > 0:
            f *= _lognormal(cj.sigma, self.streams.stream(("compute", stage, replica)).normal())
        return f

    def _unit_factor(self, cj: ComputeJitter, stage: int, replica: int) -> float:
        """What stays fixed for the run on (stage, replica): the straggler slowdown times the GPU speed.

        Each is drawn from a stream of the unit's own, so neither depends on the order in which units
        first compute, and a sigma's draws are the same standard normals at every value (common
        random numbers)."""
        f = 1.0
        if (cj.straggler_probability > 0 and cj.straggler_slowdown > 1
                and self.streams.child(("straggler", stage, replica)).random() < cj.straggler_probability):
            f = cj.straggler_slowdown
        if cj.iteration_sigma > 0:  # one draw per GPU of the unit; the unit waits for its slowest GPU
            z = float(self.streams.child(("speed", stage, replica)).standard_normal(self.lockstep).max())
            f *= _lognormal(cj.iteration_sigma, z)
        return f

    def _latency_switch(self, c: Congestion) -> Callable[[bool], None]:
        def switch(on: bool) -> None:
            self.step_latency[c.tier] = c.latency_s if on else 0.0
        return switch

    def processes(self, env: Any, network: Any) -> list[Generator[Any, Any, None]]:
        """Congestion on/off processes, one per link of each congested tier (started at t=0)."""
        config = self.config
        if not config.congestion:
            return []
        nominal = dict(network.nominal)
        procs = []
        for c in config.congestion:
            links = [link for link in sorted(nominal) if tier_of(link) == c.tier]
            if c.scope == "tier":
                if links:
                    g = self.streams.child(("congestion", str(c.tier)))
                    on_change = self._latency_switch(c) if c.latency_s > 0 else None
                    procs.append(congestion_process(env, network.set_capacities, links, nominal, c, g, on_change))
                continue
            for link in links:
                g = self.streams.child(("congestion", str(link)))
                procs.append(congestion_process(env, network.set_capacities, [link], nominal, c, g))
        return procs


def congestion_process(env: Any, set_capacities: Callable[[dict[str, float]], None], links: list[str],
                       nominal: Mapping[str, float], c: Congestion, g: np.random.Generator,
                       on_change: Callable[[bool], None] | None = None) -> Generator[Any, Any, None]:
    """Alternate exponential on/off periods; while on, ``links`` run at ``bandwidth_factor`` of nominal
    (and ``on_change`` is told when an episode starts and ends: the step latency's switch).

    The start state is drawn from the stationary probability and, durations being memoryless,
    the first period is a full exponential draw: the process is stationary from t=0.
    """
    on = g.random() < c.p_on
    while True:
        if on:
            set_capacities({link: nominal[link] * c.bandwidth_factor for link in links})
            if on_change is not None:
                on_change(True)
            yield env.timeout(c.mean_on_s * g.standard_exponential())
            set_capacities({link: nominal[link] for link in links})
            if on_change is not None:
                on_change(False)
        else:
            yield env.timeout(c.mean_off_s * g.standard_exponential())
        on = not on


def link_tier(link: str) -> str | None:
    """Tier of a network link (a :class:`topology.links.LinkId`, or its text); None if it names none."""
    tier = tier_of(link)
    return None if tier is None else tier.value
