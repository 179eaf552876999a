"""Jitter: seeded, composable perturbations of a simulated iteration (off by default).

Configured under ``simulation.jitter`` in a scenario (every key also via
``--set simulation.jitter.<path>=value``)::

    simulation:
      jitter:
        preset: vista              # optional: start from JITTER_PRESETS[...]; explicit keys override it
        noise:                     # mean-preserving lognormal factor on each transfer's base duration
          nic:                     # link tier: nic (inter-node) or nvlink (intra-node)
            sigma: 0.25            # dimensionless; factor = exp(N(-sigma^2/2, sigma)), so E[factor] = 1
            kinds: {mp: 0.3}       # optional per traffic kind: mp, pp, dp_allreduce, dp_allgather (dp = both)
          nvlink: {sigma: 0.02}
        congestion:                # on/off episodes per link of a tier (alternating exponential durations)
          nic:
            bandwidth_factor: 0.3  # in (0, 1]: capacity multiplier while an episode is on
            mean_on_s: 2.0         # seconds, mean episode length
            mean_off_s: 18.0       # seconds, mean gap between episodes
            scope: link            # link: independent per link; tier: all links of the tier at once
        compute:
          sigma: 0.01              # lognormal noise on every compute timeout (mean-preserving, dimensionless)
          stragglers:
            probability: 0.02      # in [0, 1]: chance per iteration that a (stage, replica) is a straggler
            slowdown: 1.15         # >= 1: compute-time multiplier of a straggler for the whole iteration

:class:`Jitter` is the simulation engine's ``perturb`` hook: ``compute_factor``,
``comm_factor`` and ``processes`` (see :mod:`sim.perturb`): a run binds it to its generator
(:meth:`Jitter.bind`), which gives a :class:`RunJitter` owning the run's random streams
(:class:`sim.streams.RunStreams`). They are independent child streams derived from that
generator's seed sequence (no draws are taken from the generator itself), one per purpose —
noise per (kind, tier), stragglers per (stage, replica), compute noise, congestion per link.
Keyed streams keep *common random numbers* across parameter values (a link's episode sequence
does not depend on what the rest of the run did), which the ablation in
:mod:`scenarios.montecarlo` and ``trainsim jitter fit`` rely on.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainsim.operators.errors import ConfigError, check_number
from trainsim.sim.kinds import TrafficKind
from trainsim.sim.streams import NormalStream, RunStreams
from trainsim.topology.links import LinkTier, tier_of

# Plain strings (the configuration's vocabulary, YAML- and JSON-ready), from the enums.
TIERS: tuple[str, ...] = tuple(t.value for t in LinkTier)
KINDS: tuple[str, ...] = tuple(k.value for k in TrafficKind)
KIND_ALIASES = {"dp": (TrafficKind.DP_ALLREDUCE.value, TrafficKind.DP_ALLGATHER.value)}
#: Sources of variance the Monte Carlo ablation switches on one at a time.
SOURCES = ("mp", "pp", "dp", "compute", "congestion")
SOURCE_KINDS = {"mp": (TrafficKind.MP.value,), "pp": (TrafficKind.PP.value,), "dp": KIND_ALIASES["dp"]}

FIELD = "simulation.jitter"


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class TierNoise:
    """Lognormal noise on the transfers of one link tier; ``kinds`` overrides sigma per traffic kind."""

    tier: str
    sigma: float = 0.0
    kinds: tuple[tuple[str, float], ...] = ()

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

    @property
    def p_on(self) -> float:
        """Stationary probability that an episode is on."""
        return self.mean_on_s / (self.mean_on_s + self.mean_off_s)


@dataclass(frozen=True)
class ComputeJitter:
    sigma: float = 0.0
    straggler_probability: float = 0.0
    straggler_slowdown: float = 1.0

    @property
    def active(self) -> bool:
        return self.sigma > 0 or (self.straggler_probability > 0 and self.straggler_slowdown > 1)


@dataclass(frozen=True)
class Jitter:
    """A validated jitter configuration; also the engine's perturb hook (see module doc)."""

    noise: tuple[TierNoise, ...] = ()
    congestion: tuple[Congestion, ...] = ()
    compute: ComputeJitter = field(default_factory=ComputeJitter)
    preset: str | None = None
    #: sigma per (kind, tier), materialised for the hot path
    _sigma: dict[tuple[str, str], float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = {}
        for tn in self.noise:
            for kind in KINDS:
                s = tn.sigma_for(kind)
                if s > 0:
                    table[(kind, tn.tier)] = s
        object.__setattr__(self, "_sigma", table)

    # -- what is on ------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return bool(self._sigma) or bool(self.congestion) or self.compute.active

    def sources(self) -> tuple[str, ...]:
        """The variance sources this configuration switches on (subset of SOURCES)."""
        out = [s for s, kinds in SOURCE_KINDS.items() if any((k, t) in self._sigma for k in kinds for t in TIERS)]
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
        kinds = SOURCE_KINDS[source]
        noise = tuple(
            TierNoise(tn.tier, 0.0, tuple((k, tn.sigma_for(k)) for k in kinds)) for tn in self.noise
        )
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
                out["noise"][tn.tier] = entry
        if self.congestion:
            out["congestion"] = {
                c.tier: {"bandwidth_factor": c.bandwidth_factor, "mean_on_s": c.mean_on_s, "mean_off_s": c.mean_off_s,
                         "scope": c.scope}
                for c in self.congestion
            }
        cj = self.compute
        if cj != ComputeJitter():
            out["compute"] = {"sigma": cj.sigma, "stragglers": {"probability": cj.straggler_probability,
                                                                "slowdown": cj.straggler_slowdown}}
        return out

    # -- the perturb hook ------------------------------------------------------------------
    def bind(self, rng: np.random.Generator) -> RunJitter:
        """This configuration bound to one run whose generator is ``rng`` (what the engine calls)."""
        return RunJitter(self, RunStreams(rng))

    # One-off factors outside a run (the three-argument hook of sim.perturb.Perturbation). They keep
    # no state between calls: a straggler is decided by the generator's seed, as in a run, and the
    # noise is drawn from the generator itself.
    def comm_factor(self, kind: str, tier: str, rng: np.random.Generator) -> float:
        """Multiplier of one transfer's base duration: lognormal with mean 1 (1.0 when off)."""
        sigma = self._sigma.get((kind, tier))
        if sigma is None:
            return 1.0
        return _lognormal(sigma, float(rng.standard_normal()))

    def compute_factor(self, stage: int, replica: int, rng: np.random.Generator) -> float:
        """Multiplier of one compute timeout of (stage, replica): straggler slowdown times noise."""
        return self.bind(rng).compute_factor(stage, replica)

    def processes(self, env: Any, network: Any, rng: np.random.Generator) -> list[Generator[Any, Any, None]]:
        """Congestion on/off processes, one per link of each congested tier (started at t=0)."""
        return self.bind(rng).processes(env, network)


def _lognormal(sigma: float, z: float) -> float:
    """exp(N(-sigma^2/2, sigma)) from a standard normal ``z``: mean 1."""
    return math.exp(sigma * z - 0.5 * sigma * sigma)


class RunJitter:
    """A :class:`Jitter` bound to one run: the run's streams and which ranks straggle (see module doc)."""

    __slots__ = ("config", "streams", "stragglers", "_noise")

    def __init__(self, config: Jitter, streams: RunStreams) -> None:
        self.config = config
        self.streams = streams
        self.stragglers: dict[tuple[int, int], bool] = {}
        self._noise: dict[tuple[str, str], NormalStream] = {}  # (kind, tier) -> its stream

    def comm_factor(self, kind: str, tier: str) -> float:
        """Multiplier of one transfer's base duration: lognormal with mean 1 (1.0 when off)."""
        sigma = self.config._sigma.get((kind, tier))
        if sigma is None:
            return 1.0
        stream = self._noise.get((kind, tier))
        if stream is None:
            # str(): the key's repr seeds the stream, so enum members must not appear in it.
            stream = self._noise[kind, tier] = self.streams.stream(("noise", str(kind), str(tier)))
        return _lognormal(sigma, stream.normal())

    def compute_factor(self, stage: int, replica: int) -> float:
        """Multiplier of one compute timeout of (stage, replica): straggler slowdown times noise."""
        cj = self.config.compute
        if not cj.active:
            return 1.0
        f = 1.0
        if cj.straggler_probability > 0 and cj.straggler_slowdown > 1:
            key = (stage, replica)
            slow = self.stragglers.get(key)
            if slow is None:
                # One draw per (stage, replica) per run, from a stream of its own: whether a rank
                # straggles does not depend on the order in which ranks first compute.
                slow = self.streams.child(("straggler", stage, replica)).random() < cj.straggler_probability
                self.stragglers[key] = slow
            if slow:
                f = cj.straggler_slowdown
        if cj.sigma > 0:
            f *= _lognormal(cj.sigma, self.streams.stream(("compute", stage, replica)).normal())
        return f

    def processes(self, env: Any, network: Any) -> list[Generator[Any, Any, None]]:
        """Congestion on/off processes, one per link of each congested tier (started at t=0)."""
        config = self.config
        if not config.congestion:
            return []
        nominal = dict(getattr(network, "nominal", None) or network.capacities)
        procs = []
        for c in config.congestion:
            links = [link for link in sorted(nominal) if tier_of(link) == c.tier]
            if c.scope == "tier":
                if links:
                    g = self.streams.child(("congestion", str(c.tier)))
                    procs.append(congestion_process(env, network.set_capacity, links, nominal, c, g))
                continue
            for link in links:
                g = self.streams.child(("congestion", str(link)))
                procs.append(congestion_process(env, network.set_capacity, [link], nominal, c, g))
        return procs


def congestion_process(env: Any, set_capacity: Callable[[str, float], None], links: list[str],
                       nominal: Mapping[str, float], c: Congestion,
                       g: np.random.Generator) -> Generator[Any, Any, None]:
    """Alternate exponential on/off periods; while on, ``links`` run at ``bandwidth_factor`` of nominal.

    The start state is drawn from the stationary probability and, durations being memoryless,
    the first period is a full exponential draw: the process is stationary from t=0.
    """
    on = g.random() < c.p_on
    while True:
        if on:
            for link in links:
                set_capacity(link, nominal[link] * c.bandwidth_factor)
            yield env.timeout(c.mean_on_s * g.standard_exponential())
            for link in links:
                set_capacity(link, nominal[link])
        else:
            yield env.timeout(c.mean_off_s * g.standard_exponential())
        on = not on


def link_tier(link: str) -> str | None:
    """Tier of a network link (a :class:`topology.links.LinkId`, or its text); None if it names none."""
    tier = tier_of(link)
    return None if tier is None else tier.value


# ---------------------------------------------------------------------------------------------
# Presets (reasoning in docs/jitter.md)

JITTER_PRESETS: dict[str, dict[str, Any]] = {
    # Vista: one GH200 and one NDR NIC per node, so every MP, PP and DP collective crosses
    # InfiniBand; a shared fabric with adaptive routing sees per-collective variability and
    # multi-second congestion episodes from other jobs.
    "vista": {
        "noise": {"nic": {"sigma": 0.2}, "nvlink": {"sigma": 0.02}},
        "congestion": {"nic": {"bandwidth_factor": 0.25, "mean_on_s": 15.0, "mean_off_s": 25.0, "scope": "tier"}},
        "compute": {"sigma": 0.01, "stragglers": {"probability": 0.01, "slowdown": 1.1}},
    },
    # Perlmutter: four A100s per node on NVLink, four Slingshot NICs; the paper measures under 1%.
    "perlmutter": {
        "noise": {"nic": {"sigma": 0.01}, "nvlink": {"sigma": 0.005}},
        "compute": {"sigma": 0.002},
    },
}


# ---------------------------------------------------------------------------------------------
# Parsing


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping, got {value!r}")
    return value


def _keys(d: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
    known = tuple(known)
    for k in d:
        if k not in known:
            raise ConfigError(f"{path}.{k}", f"unknown key; known keys: {', '.join(known)}")


def _number(value: Any, path: str) -> float:
    return float(check_number(path, value))


def _sigma(value: Any, path: str) -> float:
    v = _number(value, path)
    if v < 0:
        raise ConfigError(path, f"sigma must not be negative, got {v!r}")
    if v > 3:  # exp(N(-s^2/2, s)) with s > 3 has a median below 1% of its mean: certainly a typo
        raise ConfigError(path, f"sigma {v!r} is implausibly large (the median factor would be "
                                f"{math.exp(-v * v / 2):.2g} of the mean); expected at most 3")
    return v


def _probability(value: Any, path: str) -> float:
    v = _number(value, path)
    if not 0 <= v <= 1:
        raise ConfigError(path, f"a probability must lie in [0, 1], got {v!r}")
    return v


def _duration(value: Any, path: str) -> float:
    v = _number(value, path)
    if not v > 0:
        raise ConfigError(path, f"a duration must be positive (seconds), got {v!r}")
    return v


def _tier(key: Any, path: str) -> str:
    if key not in TIERS:
        raise ConfigError(f"{path}.{key}", f"unknown link tier {key!r}; known tiers: {', '.join(TIERS)}")
    return str(key)


def parse_jitter(mapping: Mapping[str, Any] | None) -> Jitter | None:
    """Validate ``simulation.jitter``; None when it switches nothing on (the default)."""
    raw = _mapping(mapping, FIELD)
    _keys(raw, FIELD, ("preset", "noise", "congestion", "compute"))
    preset = raw.get("preset")
    if preset is not None and str(preset).lower() in ("none", "off"):
        preset = None
    elif preset is not None:
        if preset not in JITTER_PRESETS:
            raise ConfigError(f"{FIELD}.preset", f"unknown jitter preset {preset!r}; known: "
                                                 f"{', '.join(JITTER_PRESETS)}, none")
        raw = _merge(JITTER_PRESETS[preset], {k: v for k, v in raw.items() if k != "preset"})
    else:
        raw = {k: v for k, v in raw.items() if k != "preset"}

    noise = []
    nsec = _mapping(raw.get("noise"), f"{FIELD}.noise")
    for tier_key, entry in nsec.items():
        tier = _tier(tier_key, f"{FIELD}.noise")
        path = f"{FIELD}.noise.{tier}"
        entry = _mapping(entry, path)
        _keys(entry, path, ("sigma", "kinds"))
        sigma = _sigma(entry.get("sigma", 0.0), f"{path}.sigma")
        kinds: dict[str, float] = {}
        ksec = _mapping(entry.get("kinds"), f"{path}.kinds")
        # 'dp' first so that an explicit dp_allreduce / dp_allgather overrides it
        for kind in sorted(ksec, key=lambda k: k != "dp"):
            if kind not in KINDS and kind not in KIND_ALIASES:
                raise ConfigError(f"{path}.kinds.{kind}", f"unknown traffic kind; known: "
                                                          f"{', '.join((*KINDS, *KIND_ALIASES))}")
            s = _sigma(ksec[kind], f"{path}.kinds.{kind}")
            for k in KIND_ALIASES.get(kind, (kind,)):
                kinds[k] = s
        noise.append(TierNoise(tier, sigma, tuple(sorted(kinds.items()))))

    congestion = []
    csec = _mapping(raw.get("congestion"), f"{FIELD}.congestion")
    for tier_key, entry in csec.items():
        tier = _tier(tier_key, f"{FIELD}.congestion")
        path = f"{FIELD}.congestion.{tier}"
        entry = _mapping(entry, path)
        if not entry:
            continue
        _keys(entry, path, ("bandwidth_factor", "mean_on_s", "mean_off_s", "scope"))
        scope = entry.get("scope", "link")
        if scope not in ("link", "tier"):
            raise ConfigError(f"{path}.scope", f"must be 'link' (one process per link) or 'tier' (all links "
                                               f"of the tier together), got {scope!r}")
        for k in ("bandwidth_factor", "mean_on_s", "mean_off_s"):
            if k not in entry:
                raise ConfigError(f"{path}.{k}", "required when congestion is configured for a tier")
        bf = _number(entry["bandwidth_factor"], f"{path}.bandwidth_factor")
        if not 0 < bf <= 1:
            raise ConfigError(f"{path}.bandwidth_factor", f"must lie in (0, 1] (capacity multiplier while "
                                                          f"congested), got {bf!r}")
        c = Congestion(tier, bf, _duration(entry["mean_on_s"], f"{path}.mean_on_s"),
                       _duration(entry["mean_off_s"], f"{path}.mean_off_s"), scope)
        if bf < 1:
            congestion.append(c)

    path = f"{FIELD}.compute"
    comp = _mapping(raw.get("compute"), path)
    _keys(comp, path, ("sigma", "stragglers"))
    strag = _mapping(comp.get("stragglers"), f"{path}.stragglers")
    _keys(strag, f"{path}.stragglers", ("probability", "slowdown"))
    slowdown = _number(strag.get("slowdown", 1.0), f"{path}.stragglers.slowdown")
    if slowdown < 1:
        raise ConfigError(f"{path}.stragglers.slowdown", f"must be >= 1 (a compute-time multiplier), got {slowdown!r}")
    compute = ComputeJitter(
        sigma=_sigma(comp.get("sigma", 0.0), f"{path}.sigma"),
        straggler_probability=_probability(strag.get("probability", 0.0), f"{path}.stragglers.probability"),
        straggler_slowdown=slowdown,
    )

    jitter = Jitter(noise=tuple(noise), congestion=tuple(congestion), compute=compute, preset=preset)
    return jitter if jitter.active else None

