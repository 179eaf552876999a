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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainsim.operators import MODEL_PRESETS, ConfigError, ModelSpec, Parallelism, TrainingSpec
from trainsim.operators.errors import check_number, show
from trainsim.operators.spec import check_model_fits
from trainsim.topology import ClusterSpec, cluster_from_mapping

BUNDLED_DIR = Path(__file__).parent / "bundled"
SECTIONS = ("model", "training", "parallelism", "cluster", "profile", "simulation")
TOP_LEVEL = ("name", "description", *SECTIONS)
SIM_MODES = ("realistic", "ideal")
#: A scenario is a few hundred bytes of YAML; these bounds refuse what is not one (a binary file,
#: a YAML "billion laughs" of anchors and aliases, pathological nesting) before it costs anything.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 100_000  # YAML nodes with every alias expanded
MAX_SEED = 2**64 - 1


@dataclass(frozen=True)
class ProfileSpec:
    """Which duration profile prices the operators.

    ``name``: ``reference:Perlmutter``, ``reference:Vista`` (need the reference
    samples), ``roofline`` (from the cluster's GPU specs), a shipped profile such
    as ``h100-sxm-bf16``, or a sample directory.
    """

    name: str = "roofline"
    reference_data: str | None = None  # overrides --reference-data / TRAINSIM_REFERENCE_DATA
    # above a regressor's sampled range: "work" scales the edge's time with the operator's work,
    # "edge" keeps the edge's time (the paper's trees); None: edge for reference:*, else work
    extrapolate: str | None = None
    # what the regressors learn: "duration" (the paper's trees), "efficiency" (the slowdown over
    # the GPU's roofline, calibration.efficiency) or "monotone" (the same, never faster with more
    # work: calibration.profile.ROOFLINE_EXPONENT); None: duration for reference:* and for samples of
    # a GPU without datasheet peaks, else efficiency
    model: str | None = None
    # the profile's measured sustained-load power cap (calibration.power_cap: tensor-core kernels slower
    # than their burst samples when a stage keeps the GPU in them); false: priced as sampled
    power_cap: bool = True
    # this machine's host (CPU) speed against the profile's typical host: every PyTorch runtime's host
    # cost times it (calibration/host_overhead.py fits such a factor per measured machine; the host band
    # shows the measured range); None: the typical host, with the band
    host_factor: float | None = None

    @property
    def extrapolation(self) -> str:
        if self.extrapolate is not None:
            return self.extrapolate
        return "edge" if self.name.startswith("reference:") else "work"

    def __post_init__(self) -> None:
        if self.extrapolate is not None and self.extrapolate not in ("work", "edge"):
            raise ConfigError("profile.extrapolate", f"must be work or edge, got {show(self.extrapolate)}")
        if self.model is not None and self.model not in ("duration", "efficiency", "monotone"):
            raise ConfigError("profile.model", f"must be duration, efficiency or monotone, got {show(self.model)}")
        if not isinstance(self.power_cap, bool):
            raise ConfigError("profile.power_cap", f"must be true or false, got {show(self.power_cap)}")
        if self.host_factor is not None:
            check_number("profile.host_factor", self.host_factor, positive=True)
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError("profile.name", f"must be a profile name or a samples folder, got {show(self.name)}")
        if self.reference_data is not None and (not isinstance(self.reference_data, str)
                                                or not self.reference_data.strip()):
            raise ConfigError("profile.reference_data", f"must be a folder path, got {show(self.reference_data)}")


@dataclass(frozen=True)
class SimulationSpec:
    mode: str = "realistic"
    seed: int = 0
    jitter: Mapping[str, Any] = field(default_factory=dict)  # validated by sim.jitter
    # gradient buckets reduced during the last backward (Megatron-LM) instead of after it (DeepSpeed)
    overlap_dp: bool = False  # the older name of training.overlap_grad_reduce

    def __post_init__(self) -> None:
        if not isinstance(self.mode, str) or self.mode not in SIM_MODES:
            raise ConfigError("simulation.mode", f"unknown mode {show(self.mode)}; "
                                                 f"expected one of {', '.join(SIM_MODES)}")
        check_number("simulation.seed", self.seed, integer=True, minimum=0, maximum=MAX_SEED,
                     reason="a seed is a 64-bit unsigned integer")
        if not isinstance(self.jitter, Mapping):
            raise ConfigError("simulation.jitter", f"must be a mapping, got {show(self.jitter)}")
        if not isinstance(self.overlap_dp, bool):
            raise ConfigError("simulation.overlap_dp", f"must be true or false, got {show(self.overlap_dp)}")


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
    def overlap_grad_reduce(self) -> bool:
        """Gradient buckets reduced during the last backward: training.overlap_grad_reduce, else the
        older simulation.overlap_dp."""
        t = self.training.overlap_grad_reduce
        return self.simulation.overlap_dp if t is None else t

    @property
    def tokens_per_iteration(self) -> int:
        t = self.training
        return t.micro_batch * t.micro_batches * self.parallelism.dp * self.model.seq_len


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader where PyYAML was built with it (several times faster), else PyYAML's own;
    plus YAML 1.2's floats with an exponent and no point (``1e9``, ``5E-3``), which YAML 1.1 reads as
    strings, so that ``--set ...mean_on_s=1e9`` is a number as it is everywhere else."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
_LOADER: Any = _Loader


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def _check_structure(text: str, where: str) -> None:
    """Refuse deep nesting and alias bombs before anything is built (one pass over the parse events)."""
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    stack: list[list[Any]] = []  # [anchor, nodes so far] per open collection
    try:
        for ev in yaml.parse(text, Loader=_LOADER):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append([ev.anchor, 1])
                if len(stack) > MAX_DEPTH:
                    raise ConfigError(where, f"YAML nested deeper than {MAX_DEPTH} levels; a scenario is a "
                                             f"mapping of sections of keys")
                continue
            if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, n = stack.pop()
            elif isinstance(ev, yaml.ScalarEvent):
                anchor, n = ev.anchor, 1
            elif isinstance(ev, yaml.AliasEvent):
                anchor, n = None, sizes.get(ev.anchor, 1)
            else:
                continue
            if anchor is not None:
                sizes[anchor] = n
            if stack:
                stack[-1][1] += n
            if n > MAX_NODES or (stack and stack[-1][1] > MAX_NODES):
                raise ConfigError(where, f"YAML expands to more than {MAX_NODES:,} values (anchors and aliases "
                                         f"repeated); a scenario has a few dozen")
    except yaml.YAMLError:
        return  # reported with its position by the full load


def _parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with every failure a ConfigError naming ``where``."""
    _check_structure(text, where)
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (C or Python)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "malformed YAML"
        raise ConfigError(where, f"malformed YAML{at}: {problem}") from None
    except (ValueError, ArithmeticError, RecursionError) as e:  # e.g. an integer of more than 4,300 digits
        if "digits" in str(e):
            raise ConfigError(where, "holds an integer of more than 4,300 digits") from None
        raise ConfigError(where, f"malformed YAML: {show(str(e), 100)}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        if path.is_dir():
            raise ConfigError(where, "is a folder, not a scenario file")
        if not path.is_file():
            raise ConfigError(where, "is not a regular file (a scenario is a YAML file)")
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(where, f"cannot read scenario file: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(where, f"larger than {MAX_FILE_BYTES // 1024} KiB; a scenario file is a few hundred bytes "
                                 f"of YAML")
    if b"\0" in raw:
        raise ConfigError(where, "is a binary file (it contains NUL bytes), not a YAML scenario")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(where, f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    if not text.strip():
        raise ConfigError(where, "is empty; a scenario file is a YAML mapping with sections " + ", ".join(SECTIONS))
    data = _parse_yaml(text, where)
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {_yaml_kind(data)}"
        raise ConfigError(where, f"holds {kind}; a scenario file must be a YAML mapping with sections "
                          + ", ".join(SECTIONS))
    return data


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def resolve(name_or_path: str) -> Path:
    """A scenario argument is a path or a bundled name."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ConfigError("scenario", f"expected a scenario file or a bundled name, got {show(name_or_path)}")
    if "\0" in name_or_path:
        raise ConfigError("scenario", "the scenario path contains a NUL character")
    p = Path(name_or_path)
    try:
        exists = p.exists()
        is_dir, is_file = p.is_dir(), p.is_file()
    except OSError as e:  # e.g. a name too long for the file system
        raise ConfigError(name_or_path, f"cannot read scenario file: {e.strerror or e}") from None
    if p.suffix in (".yaml", ".yml") or exists:
        if is_dir:
            raise ConfigError(name_or_path, "is a folder, not a scenario file")
        if not is_file:
            raise ConfigError(name_or_path, "no such scenario file" if not exists else
                              "is not a regular file (a scenario is a YAML file)")
        return p
    bundled = BUNDLED_DIR / f"{name_or_path}.yaml"
    if "/" not in name_or_path and bundled.is_file():
        return bundled
    raise ConfigError("scenario", f"unknown scenario {show(name_or_path)}: not a file and not a bundled scenario "
                      f"(see `trainsim scenarios`)")


def _check_override_text(item: str) -> None:
    """A ``--set`` is printable text: no byte that is not UTF-8, no control character."""
    for i, ch in enumerate(item):
        if "\udc80" <= ch <= "\udcff":  # how Python keeps a non-UTF-8 byte of argv
            raise ConfigError("--set", f"{show(item[:i])}... contains a byte that is not UTF-8 "
                                       f"(0x{ord(ch) - 0xDC00:02x}, at character {i})")
        if ch != "\t" and (ord(ch) < 32 or 127 <= ord(ch) < 160 or "\ud800" <= ch <= "\udfff"):
            raise ConfigError("--set", f"{show(item)} contains the control character U+{ord(ch):04X} "
                                       f"(at character {i})")


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` (value parsed as YAML) to a scenario mapping."""
    if isinstance(overrides, (str, bytes)):
        raise ConfigError("--set", "expected a list of section.key=value strings, got one string")
    out = copy.deepcopy(data)
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError("--set", f"expected section.key=value, got {show(item)}")
        _check_override_text(item)
        path, sep, value = item.partition("=")
        keys = [k.strip() for k in path.strip().split(".")]
        if not sep or len(keys) < 2 or not all(keys):
            raise ConfigError("--set", f"expected section.key=value, got {show(item)}")
        if keys[0] not in SECTIONS:
            raise ConfigError("--set", f"unknown section {show(keys[0])} in {show(item)}; sections are "
                                       f"{', '.join(SECTIONS)}")
        if len(keys) > MAX_DEPTH:
            raise ConfigError("--set", f"{show(item)}: keys nested deeper than {MAX_DEPTH} levels")
        _check_structure(value, f"--set {keys[0]}.{keys[1]}")  # a nesting or alias bomb is an error, not a string
        try:
            parsed = _parse_yaml(value, "--set") if value.strip() else ""
        except ConfigError:
            parsed = value  # not YAML: the string itself (e.g. a path with a colon)
        _set_key(out, keys, parsed, "--set", item)
    return out


def apply_values(data: dict[str, Any], values: Mapping[str, Any], option: str = "overrides") -> dict[str, Any]:
    """Apply ``{"section.key": value}`` (values as Python objects, as the API takes them)."""
    out = copy.deepcopy(data)
    for dotted, value in values.items():
        keys = str(dotted).split(".")
        if len(keys) < 2 or not all(keys):
            raise ConfigError(option, f"expected a key like section.key, got {show(dotted)}")
        if keys[0] not in SECTIONS:
            raise ConfigError(option, f"unknown section {show(keys[0])} in {show(dotted)}; sections are "
                                      f"{', '.join(SECTIONS)}")
        _set_key(out, keys, value, option, str(dotted))
    return out


def _set_key(data: dict[str, Any], keys: Sequence[str], value: Any, option: str, item: str) -> None:
    """Set ``data[k0][k1]...[kn] = value``, creating missing sections; ``item`` names it in errors."""
    node = data
    for k in keys[:-1]:
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(option, f"{k!r} in {show(item)} is not a section")
        node = nxt
    node[keys[-1]] = value


def _section(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    sec = data.get(name)
    if sec is None:
        return {}
    if not isinstance(sec, dict):
        raise ConfigError(name, f"must be a mapping of keys to values, got {show(sec)}")
    for key in sec:
        if not isinstance(key, str):
            raise ConfigError(f"{name}.{show(key)}", "unknown key (keys are names)")
    return dict(sec)


def _build(cls: type, section: str, values: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    for key in values:
        if key not in known:
            raise ConfigError(f"{section}.{key}", f"unknown key; known keys: {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError) as e:  # slipped past validation
        raise ConfigError(section, f"invalid values: {show(str(e), 100)}") from None


def _model(sec: dict[str, Any]) -> ModelSpec:
    preset = sec.pop("preset", None)
    if preset is not None:
        if not isinstance(preset, str) or preset not in MODEL_PRESETS:
            raise ConfigError("model.preset", f"unknown model preset {show(preset)}; known: "
                                              f"{', '.join(MODEL_PRESETS)}")
        base = dataclasses.asdict(MODEL_PRESETS[preset])
        if "rotary" in sec and "position" not in sec:  # the override decides the positions afresh
            base["position"] = None
        if "position" in sec and "rotary" not in sec:
            base["rotary"] = True
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
        if not isinstance(key, str) or key not in TOP_LEVEL:
            raise ConfigError(key if isinstance(key, str) and len(key) <= 40 else show(key, 40),
                              f"unknown section; sections are {', '.join(SECTIONS)}")
    for key in ("name", "description"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
            raise ConfigError(key, f"must be a string, got {show(value)}")
    model = _model(_section(data, "model"))
    training = _build(TrainingSpec, "training", _section(data, "training"))
    par = _build(Parallelism, "parallelism", _section(data, "parallelism"))
    check_model_fits(model, par)
    cluster_sec = _section(data, "cluster")
    if not cluster_sec:
        raise ConfigError("cluster", "missing section: give cluster.preset (e.g. perlmutter, vista, dgx-h100)")
    try:
        cluster = cluster_from_mapping(cluster_sec)
    except ConfigError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError) as e:  # slipped past topology's checks
        raise ConfigError("cluster", f"invalid values: {show(str(e), 100)}") from None
    if par.gpus % cluster.gpus_per_node:
        raise ConfigError("parallelism", f"{par.degrees} = {par.gpus} GPUs is not a multiple of "
                          f"cluster.gpus_per_node = {cluster.gpus_per_node}")
    if cluster.max_nodes is not None and par.gpus // cluster.gpus_per_node > cluster.max_nodes:
        raise ConfigError("parallelism", f"{par.degrees} = {par.gpus} GPUs need {par.gpus // cluster.gpus_per_node} "
                          f"nodes of cluster.gpus_per_node = {cluster.gpus_per_node}; cluster.max_nodes = "
                          f"{cluster.max_nodes} ({cluster.max_nodes * cluster.gpus_per_node} GPUs)")
    profile = _build(ProfileSpec, "profile", _section(data, "profile"))
    simulation = _build(SimulationSpec, "simulation", _section(data, "simulation"))
    _check_jitter(simulation.jitter)
    return Scenario(
        name=str(data.get("name") or name), description=str(data.get("description") or ""),
        model=model, training=training, parallelism=par, cluster=cluster,
        profile=profile, simulation=simulation, raw=data,
    )


def _check_jitter(jitter: Mapping[str, Any]) -> None:
    """Validate ``simulation.jitter`` when the scenario is read, not when a run starts."""
    if not jitter:
        return
    from trainsim.sim.jitter_config import parse_jitter

    try:
        parse_jitter(jitter)
    except ConfigError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError) as e:  # slipped past sim.jitter's checks
        raise ConfigError("simulation.jitter", f"invalid values: {show(str(e), 100)}") from None


def load_scenario(name_or_path: str, overrides: Sequence[str] = ()) -> Scenario:
    path = resolve(name_or_path)
    data = apply_overrides(_read_yaml(path), overrides)
    return scenario_from_mapping(data, name=path.stem)
