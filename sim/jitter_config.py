"""Jitter configuration: the presets and the parser of ``simulation.jitter`` (one error per bad key).

The models themselves (:class:`~trainsim.sim.jitter.Jitter` and the per-run
:class:`~trainsim.sim.jitter.RunJitter`) live in :mod:`trainsim.sim.jitter`; this module turns a
scenario's mapping, a preset merged with explicit keys, into a validated ``Jitter``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

from trainsim.operators.errors import ConfigError, check_number
from trainsim.sim.jitter import (
    FIELD,
    KIND_ALIASES,
    KINDS,
    TIERS,
    ComputeJitter,
    Congestion,
    Jitter,
    TierNoise,
)
from trainsim.sim.jitter_presets import FITTED_PRESETS, PRESET_ALIASES

# ---------------------------------------------------------------------------------------------
# Presets: fitted on measured iteration times (sim.jitter_presets; how in docs/jitter.md)

JITTER_PRESETS: dict[str, dict[str, Any]] = {name: p["jitter"] for name, p in FITTED_PRESETS.items()}
for _alias, _target in PRESET_ALIASES.items():
    JITTER_PRESETS[_alias] = JITTER_PRESETS[_target]


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
        _keys(entry, path, ("sigma", "kinds", "tail", "message_bytes"))
        sigma = _sigma(entry.get("sigma", 0.0), f"{path}.sigma")
        message = _number(entry.get("message_bytes", TierNoise.message_bytes), f"{path}.message_bytes")
        if not message >= 1:
            raise ConfigError(f"{path}.message_bytes", f"bytes of one message must be at least 1, got {message!r}")
        tail = _mapping(entry.get("tail"), f"{path}.tail")
        _keys(tail, f"{path}.tail", ("probability", "alpha"))
        tail_p = _probability(tail.get("probability", 0.0), f"{path}.tail.probability")
        tail_alpha = _number(tail.get("alpha", 2.0), f"{path}.tail.alpha")
        if not 1 < tail_alpha <= 20:  # alpha <= 1: a Pareto draw of infinite mean
            raise ConfigError(f"{path}.tail.alpha", f"the Pareto shape must lie in (1, 20] (finite mean), "
                                                    f"got {tail_alpha!r}")
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
        noise.append(TierNoise(tier, sigma, tuple(sorted(kinds.items())), tail_p, tail_alpha if tail_p > 0 else 2.0,
                               message))

    congestion = []
    csec = _mapping(raw.get("congestion"), f"{FIELD}.congestion")
    for tier_key, entry in csec.items():
        tier = _tier(tier_key, f"{FIELD}.congestion")
        path = f"{FIELD}.congestion.{tier}"
        entry = _mapping(entry, path)
        if not entry:
            continue
        _keys(entry, path, ("bandwidth_factor", "mean_on_s", "mean_off_s", "scope", "latency_s"))
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
        latency = _number(entry.get("latency_s", 0.0), f"{path}.latency_s")
        if not (math.isfinite(latency) and latency >= 0):
            raise ConfigError(f"{path}.latency_s", f"must be a finite number of seconds >= 0 (delay per protocol "
                                                   f"step while congested), got {latency!r}")
        if latency > 0 and scope != "tier":
            raise ConfigError(f"{path}.latency_s", "needs scope: tier (the engine knows a transfer's tier, "
                                                   "not which of its links is congested)")
        c = Congestion(tier, bf, _duration(entry["mean_on_s"], f"{path}.mean_on_s"),
                       _duration(entry["mean_off_s"], f"{path}.mean_off_s"), scope, latency)
        if bf < 1 or latency > 0:
            congestion.append(c)

    path = f"{FIELD}.compute"
    comp = _mapping(raw.get("compute"), path)
    _keys(comp, path, ("sigma", "iteration_sigma", "stragglers"))
    strag = _mapping(comp.get("stragglers"), f"{path}.stragglers")
    _keys(strag, f"{path}.stragglers", ("probability", "slowdown"))
    slowdown = _number(strag.get("slowdown", 1.0), f"{path}.stragglers.slowdown")
    if slowdown < 1:
        raise ConfigError(f"{path}.stragglers.slowdown", f"must be >= 1 (a compute-time multiplier), got {slowdown!r}")
    compute = ComputeJitter(
        sigma=_sigma(comp.get("sigma", 0.0), f"{path}.sigma"),
        straggler_probability=_probability(strag.get("probability", 0.0), f"{path}.stragglers.probability"),
        straggler_slowdown=slowdown,
        iteration_sigma=_sigma(comp.get("iteration_sigma", 0.0), f"{path}.iteration_sigma"),
    )

    jitter = Jitter(noise=tuple(noise), congestion=tuple(congestion), compute=compute, preset=preset)
    return jitter if jitter.active else None

