"""Scenario files: YAML in, frozen validated objects out.

A scenario has the sections ``model``, ``training``, ``parallelism``, ``cluster``,
``profile`` and ``simulation``. ``model.preset`` names a Table IV model whose
fields explicit keys override; ``--set section.key=value`` overrides any key
after the file is read. Every mistake raises :class:`ConfigError` naming the
field (``parallelism.pp``) or the file.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainsim.operators import MODEL_PRESETS, ConfigError, ModelSpec, Parallelism, TrainingSpec
from trainsim.operators.spec import check_model_fits
from trainsim.topology import ClusterSpec, cluster_from_mapping

BUNDLED_DIR = Path(__file__).parent / "bundled"
SECTIONS = ("model", "training", "parallelism", "cluster", "profile", "simulation")
TOP_LEVEL = ("name", "description", *SECTIONS)
SIM_MODES = ("realistic", "ideal")


@dataclass(frozen=True)
class ProfileSpec:
    """Which duration profile prices the operators.

    ``name``: ``reference:Perlmutter``, ``reference:Vista`` (need the reference
    samples), ``roofline`` (from the cluster's GPU specs), a shipped profile such
    as ``h100-sxm-bf16``, or a sample directory.
    """

    name: str = "roofline"
    reference_data: str | None = None  # overrides --reference-data / TRAINSIM_REFERENCE_DATA


@dataclass(frozen=True)
class SimulationSpec:
    mode: str = "realistic"
    seed: int = 0
    jitter: Mapping[str, Any] = field(default_factory=dict)  # validated by sim.jitter
    # gradient buckets reduced during the last backward (Megatron-LM) instead of after it (DeepSpeed)
    overlap_dp: bool = False

    def __post_init__(self) -> None:
        if self.mode not in SIM_MODES:
            raise ConfigError("simulation.mode", f"unknown mode {self.mode!r}; expected one of {', '.join(SIM_MODES)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("simulation.seed", f"must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.jitter, Mapping):
            raise ConfigError("simulation.jitter", "must be a mapping")
        if not isinstance(self.overlap_dp, bool):
            raise ConfigError("simulation.overlap_dp", f"must be true or false, got {self.overlap_dp!r}")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    model: ModelSpec
    training: TrainingSpec
    parallelism: Parallelism
    cluster: ClusterSpec
    profile: ProfileSpec
    simulation: SimulationSpec
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.parallelism.gpus

    @property
    def tokens_per_iteration(self) -> int:
        t = self.training
        return t.micro_batch * t.micro_batches * self.parallelism.dp * self.model.seq_len


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read scenario file: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "malformed YAML"
        raise ConfigError(str(path), f"malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "a scenario file must be a YAML mapping with sections " + ", ".join(SECTIONS))
    return data


def resolve(name_or_path: str) -> Path:
    """A scenario argument is a path or a bundled name."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(name_or_path, "no such scenario file")
        return p
    bundled = BUNDLED_DIR / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    raise ConfigError("scenario", f"unknown scenario {name_or_path!r}: not a file and not a bundled scenario "
                      f"(see `trainsim scenarios`)")


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` (value parsed as YAML) to a scenario mapping."""
    out = copy.deepcopy(data)
    for item in overrides:
        path, sep, value = item.partition("=")
        keys = path.strip().split(".")
        if not sep or len(keys) < 2 or not all(keys):
            raise ConfigError("--set", f"expected section.key=value, got {item!r}")
        if keys[0] not in SECTIONS:
            raise ConfigError("--set", f"unknown section {keys[0]!r} in {item!r}; sections are {', '.join(SECTIONS)}")
        try:
            parsed = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            parsed = value
        node = out
        for k in keys[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            if not isinstance(nxt, dict):
                raise ConfigError("--set", f"{k!r} in {item!r} is not a section")
            node = nxt
        node[keys[-1]] = parsed
    return out


def _section(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    sec = data.get(name) or {}
    if not isinstance(sec, dict):
        raise ConfigError(name, "must be a mapping of keys to values")
    return dict(sec)


def _build(cls: type, section: str, values: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    for key in values:
        if key not in known:
            raise ConfigError(f"{section}.{key}", f"unknown key; known keys: {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except TypeError as e:  # wrong value types that slipped past validation
        raise ConfigError(section, str(e)) from None


def _model(sec: dict[str, Any]) -> ModelSpec:
    preset = sec.pop("preset", None)
    if preset is not None:
        if preset not in MODEL_PRESETS:
            raise ConfigError("model.preset", f"unknown model preset {preset!r}; known: {', '.join(MODEL_PRESETS)}")
        base = dataclasses.asdict(MODEL_PRESETS[preset])
        base.update(sec)
        sec = base
    else:
        sec.setdefault("name", "custom")
        for key in ("hidden", "heads", "layers", "seq_len"):
            if key not in sec:
                raise ConfigError(f"model.{key}", "required when model.preset is not given")
    return _build(ModelSpec, "model", sec)


def scenario_from_mapping(data: Mapping[str, Any], name: str = "scenario") -> Scenario:
    for key in data:
        if key not in TOP_LEVEL:
            raise ConfigError(str(key), f"unknown section; sections are {', '.join(SECTIONS)}")
    model = _model(_section(data, "model"))
    training = _build(TrainingSpec, "training", _section(data, "training"))
    par = _build(Parallelism, "parallelism", _section(data, "parallelism"))
    check_model_fits(model, par)
    cluster_sec = _section(data, "cluster")
    if not cluster_sec:
        raise ConfigError("cluster", "missing section: give cluster.preset (e.g. perlmutter, vista, dgx-h100)")
    cluster = cluster_from_mapping(cluster_sec)
    if par.gpus % cluster.gpus_per_node:
        raise ConfigError("parallelism", f"pp*mp*dp = {par.gpus} GPUs is not a multiple of "
                          f"cluster.gpus_per_node = {cluster.gpus_per_node}")
    if cluster.max_nodes is not None and par.gpus // cluster.gpus_per_node > cluster.max_nodes:
        raise ConfigError("parallelism", f"{par.gpus} GPUs need {par.gpus // cluster.gpus_per_node} nodes; "
                          f"cluster {cluster.name} has {cluster.max_nodes}")
    profile = _build(ProfileSpec, "profile", _section(data, "profile"))
    simulation = _build(SimulationSpec, "simulation", _section(data, "simulation"))
    return Scenario(
        name=str(data.get("name") or name), description=str(data.get("description") or ""),
        model=model, training=training, parallelism=par, cluster=cluster,
        profile=profile, simulation=simulation, raw=data,
    )


def load_scenario(name_or_path: str, overrides: Sequence[str] = ()) -> Scenario:
    path = resolve(name_or_path)
    data = apply_overrides(_read_yaml(path), overrides)
    return scenario_from_mapping(data, name=path.stem)
