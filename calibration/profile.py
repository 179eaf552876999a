"""Fitted duration profiles: one tree regressor per (operator, direction) and per collective group.

A profile is fitted from samples (the reference's, or a sample directory in our
schema), flattened to numpy (:mod:`calibration.forest`) and cached on disk as
``regressors.npz`` + ``manifest.json``. Loading a cached profile imports neither
scikit-learn nor xgboost. The cache lives under ``cache_dir``, else
``$TRAINSIM_CACHE``, else ``~/.cache/trainsim/profiles``, in a folder
``<name>-<first 12 hex of the data hash>``; a manifest whose data hash, format,
seed or fitting-library versions differ from the current ones is refitted.

Collectives are fitted per (kind, nodes, GPUs per node) on the single feature
``entries``; a group without samples predicts NaN so the caller can fall back to a
closed form and say so. The reference profiles fit trees, as the reference does (the
paper's reproduction depends on them); a sample directory whose group was measured at
``collective_curve.MIN_SIZES`` or more distinct sizes gets a
:class:`calibration.collective_curve.CollectiveCurve` instead, which interpolates between
the measured sizes where a tree steps (``collective_model="auto"`` of :func:`fit_profile`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainsim.calibration.collective_curve import ALIGN_ENTRIES, CURVE_KIND, CURVE_VERSION, MIN_SIZES, LogLogCurve
from trainsim.calibration.efficiency import (
    LAUNCH_FILE,
    REFERENCE_GPUS,
    Roofline,
    gpu_for_meta,
    gpu_of_samples,
    launch_floor_s,
    measured_launch_s,
)
from trainsim.calibration.forest import TreeEnsemble
from trainsim.calibration.roofline import RooflineProfile
from trainsim.calibration.samples import (
    COLLECTIVE_FILE,
    COMPUTE_FILE,
    META_FILE,
    CollectiveSample,
    ComputeSample,
    data_hash,
    load_sample_dir,
    read_meta,
)
from trainsim.operators.errors import ConfigError, NoSamplesError
from trainsim.operators.ops import (
    FEATURE_NAMES,
    Collective,
    CollKind,
    Direction,
    Op,
    OpKind,
    bytes_moved,
    features,
    flops,
    work_exponents,
)

# 2: the tree arrays are one uncompressed, aligned file read through a memory map (format 1 was
# a compressed npz: a warm `trainsim predict` spent 0.2 s decompressing and parsing headers)
# 3: an entry is either trees or a collective curve ("model" key); sample directories' collective
# groups are fitted as curves, so a format-2 cache of one would silently keep its trees
# 4: a residual add's backward has no FLOPs (operators.ops.flops): the efficiency models' roofline,
# and so every slowdown fitted against it, changed for that operator; an efficiency regressor keeps
# its samples' smallest slowdown (summary "slowdown_min"), its prediction's floor
# 5: profile.model "monotone": an efficiency regressor that predicts time / roofline**a from the
# features and the log roofline under monotone constraints (summary "roofline_exponent")
# 6: an efficiency regressor of an operator whose samples all sit on one roofline (no work it counts)
# is their median slowdown (summary kind CONSTANT_KIND)
FORMAT_VERSION = 6
#: the summary kind of such a regressor (:func:`_constant_slowdown`)
CONSTANT_KIND = "constant"
#: The efficiency models: the slowdown over the roofline, unconstrained ("efficiency", the default) or
#: monotone in the work ("monotone", ROOFLINE_EXPONENT)
EFFICIENCY_MODELS = frozenset({"efficiency", "monotone"})
#: A "monotone" regressor fits log(time) - a * log(roofline) under monotone constraints (more work is
#: never faster), the log roofline one of its features: time = roofline**a * exp(f), f non-decreasing
#: in every size and in the roofline, so the time is too, while inside a leaf the time still grows as
#: the roofline**a. a = 1 would force the slowdown to grow with the work; a = 0 is the monotone
#: duration model with the roofline as a feature. Chosen by the median validation MAPE over the
#: h100-sxm-bf16 profile's 83 operator regressors (80/20 split, the boosted candidate): a = 0: 7.96 %,
#: 0.5: 6.08 %, 0.8: 5.68 %, 0.9: 6.61 % (the unconstrained slowdown: 5.05 %); docs/efficiency.md.
ROOFLINE_EXPONENT = 0.8
MANIFEST_FILE = "manifest.json"
ARRAYS_FILE = "regressors.bin"
_ALIGN = 64
CACHE_ENV = "TRAINSIM_CACHE"
SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"
INTERFERENCE_FILE = "interference.json"
COLLECTIVE_FEATURES = ("entries",)

#: A regressor whose validation MAPE is above this is flagged by ``trainsim profile show`` and, when a
#: run prices an operator with it, in the run's warnings (issue 9: no profile ships an operator whose
#: error is not shown and below a stated bar without saying so)
VALIDATION_BAR_PCT = 20.0

#: Incremented by every :func:`fit_profile` call (tests check that a cache hit does not fit).
fit_calls = 0

#: ``progress(k)``: k more regressors fitted; ``on_total(n)``: n regressors are about to be fitted
Progress = Callable[[int], None] | None


class ExtrapolationWarning(UserWarning):
    """An asked shape lies outside the range the regressor was fitted on.

    Trees predict the edge value; a collective curve holds its smallest size's time below the
    range and scales with size at its largest size's bandwidth above it."""


#: what a regressor's predictor can be: flattened trees or a collective curve (both numpy only)
Predictor = TreeEnsemble | LogLogCurve


@dataclass(frozen=True, eq=False)
class Regressor:
    ensemble: Predictor
    feature_min: np.ndarray
    feature_max: np.ndarray
    summary: dict  # kind, params, validation_mape (percent or None), candidate_mape, n


def _op_key(kind: OpKind, direction: Direction) -> str:
    return f"op:{kind.value}:{direction.value}"


def _coll_key(kind: CollKind, nodes: int, gpn: int) -> str:
    return f"coll:{kind.value}:{nodes}x{gpn}"


def library_versions() -> dict[str, str | None]:
    """Versions of the fitting stack, from the installed distributions' folder names (no imports).

    ``importlib.metadata`` gives the same answer but costs 0.08 s per process (it imports the
    email package and parses METADATA files): a third of a warm ``trainsim predict``. It stays
    the fallback for installs without a ``NAME-VERSION.dist-info`` folder.
    """
    out: dict[str, str | None] = {}
    for pkg in ("numpy", "scikit-learn", "xgboost"):
        version = _dist_info_version(pkg)
        if version is None:
            from importlib import metadata

            try:
                version = metadata.version(pkg)
            except metadata.PackageNotFoundError:
                version = None
        out[pkg] = version
    return out


def _dist_info_version(pkg: str) -> str | None:
    """``1.9.1`` from ``scikit_learn-1.9.1.dist-info`` on the first ``sys.path`` entry that has one."""
    wanted = re.sub(r"[-_.]+", "_", pkg).lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[:-len(".dist-info")].rpartition("-")
                if re.sub(r"[-_.]+", "_", dist).lower() == wanted:
                    return version
    return None


class FittedProfile:
    """A :class:`operators.duration.DurationModel` backed by flattened tree ensembles."""

    def __init__(self, name: str, regressors: Mapping[str, Regressor], manifest: dict | None = None) -> None:
        self.name = name
        self.regressors: Mapping[str, Regressor] = (
            regressors if isinstance(regressors, _LazyRegressors) else dict(regressors))
        self.manifest = dict(manifest or {})
        self._warned: set[tuple] = set()
        # Above a feature's sampled range: "work" scales the duration at the edge by the operator's
        # work (ops.work_exponents; the efficiency stays the edge's), "edge" keeps the edge value as
        # the paper's trees do. The reference profiles use "edge" so the paper's cases reproduce.
        self.extrapolate = "work"
        # (peak FLOP/s, memory bytes/s) of the GPU priced: a shape scaled from the edge is never
        # priced under its roofline bound (the edge's efficiency can exceed what a bigger shape gets)
        self.hardware: tuple[float, float] | None = None
        # per PyTorch runtime, its host (CPU) cost (calibration.host_overhead); None: not measured
        self.host_overhead: dict[str, dict] | None = None
        # compute-communication interference (calibration.interference.InterferenceModel); None: not measured
        self.interference: Any = None
        # FSDP2's copy kernels (calibration.fsdp_copies.FSDPCopyRates); None: priced from the accumulation
        self.fsdp_copies: Any = None
        # the sustained-load power cap of the GPU measured (calibration.power_cap.PowerCapModel); None: not measured
        self.power_cap: Any = None
        # profile.model: "duration" regressors predict microseconds; "efficiency" ones the slowdown over
        # the roofline of the GPU measured (calibration.efficiency), priced on ``target`` (that GPU, or
        # another one's datasheet for a transfer profile)
        self.model = str(self.manifest.get("model", "duration"))
        rl = self.manifest.get("roofline")
        self.roofline: Roofline | None = Roofline.from_dict(rl) if isinstance(rl, dict) else None
        self.target: Roofline | None = self.roofline

    # ------------------------------------------------------------------ prediction

    def with_extrapolation(self, mode: str, hardware: tuple[float, float] | None = None) -> FittedProfile:
        """The same regressors, extrapolating above their range by ``mode`` ("work" or "edge"), a
        scaled shape never under the roofline of ``hardware`` (peak FLOP/s, memory bytes/s)."""
        if mode not in ("work", "edge"):
            raise ConfigError("profile.extrapolate", f"must be work or edge, got {mode!r}")
        if mode == self.extrapolate and hardware == self.hardware:
            return self
        other = copy.copy(self)
        other.extrapolate, other.hardware = mode, hardware
        other._warned = set()
        return other

    def with_target(self, target: Roofline, name: str | None = None) -> FittedProfile:
        """A transfer profile: this profile's learned efficiencies priced on another GPU's roofline.

        Only an efficiency profile can transfer. Its collectives, host costs, interference and FSDP2
        copy rates were measured on the source machine and are dropped: collectives fall back to the
        topology's closed forms (and say so), FSDP2's copies to the accumulation pass's rate. Its power
        cap is kept, as an assumption (:meth:`PowerCapModel.on`)."""
        if self.model not in EFFICIENCY_MODELS or self.roofline is None:
            raise ConfigError("profile", f"profile '{self.name}' is not an efficiency profile; only one can be "
                                         f"transferred to another GPU")
        other = copy.copy(self)
        other.name = name or f"transfer:{target.gpu}"
        other.target = target
        other.regressors = _OpsOnly(self.regressors)
        other.host_overhead = None
        other.interference = None
        other.fsdp_copies = None
        cap, source = self.power_cap, self.roofline
        if cap is not None:  # the measured GPU's throttle at the same tensor-core share: an assumption, stated
            fp8 = target.peak_fp8 / source.peak_fp8 if target.peak_fp8 > 0 and source.peak_fp8 > 0 else 0.0
            other.power_cap = cap.on(target.gpu, target.peak_flops / source.peak_flops, fp8)
        other._warned = set()
        return other

    def _predict(self, key: str, X: np.ndarray, label: str, names: Sequence[str],
                 exponents: Sequence[float] | None = None) -> np.ndarray:
        """Seconds for a duration regressor; the slowdown over the roofline for an efficiency one."""
        reg = self.regressors[key]
        slowdown = reg.summary.get("target") == "slowdown"
        scale_up = (self.extrapolate == "work" and exponents is not None and not slowdown
                    and not isinstance(reg.ensemble, LogLogCurve))
        for j, fname in enumerate(names):
            if fname == "log roofline":  # derived from the features, which carry the warning
                continue
            col = X[:, j]
            lo, hi = reg.feature_min[j], reg.feature_max[j]
            bad = (col < lo) | (col > hi)
            if bad.any() and (key, j) not in self._warned:
                self._warned.add((key, j))
                vals = col[bad]
                worst = vals[np.argmax(np.maximum(lo - vals, vals - hi))]
                if slowdown:
                    how = ("the efficiency at the edge of the range is held: the time scales with the operator's "
                           "FLOPs or bytes (its roofline)" if worst > hi else
                           "the efficiency at the edge of the range is held, never under the launch floor")
                elif isinstance(reg.ensemble, LogLogCurve):
                    how = ("the curve holds the smallest sampled size's time (latency floor)" if worst < lo else
                           "the curve scales the largest sampled size's time with size (its bus bandwidth)")
                elif scale_up:
                    how = ("the edge's time scaled with the work (efficiency held at the edge's, never above the "
                           "roofline)" if worst > hi else
                           "the trees hold the value at the edge (launch and latency floors)")
                else:
                    how = "the trees predict the value at the edge of that range"
                warnings.warn(ExtrapolationWarning(
                    f"profile '{self.name}': {label} feature {fname} = {worst:g} is outside the sampled range "
                    f"[{lo:g}, {hi:g}]; {how}"), stacklevel=3)
        us = reg.ensemble.predict(X)
        if scale_up:
            assert exponents is not None
            # a tree's value above its range is the edge's (its splits lie inside), so this is the
            # edge's duration times the growth of the work from the edge to the asked shape
            hi = np.asarray(reg.feature_max, dtype=float)
            ratio = np.where((X > hi) & (hi > 0), X / np.where(hi > 0, hi, 1.0), 1.0)
            us = us * np.prod(ratio ** np.asarray(exponents, dtype=float), axis=1)
        if not (np.isfinite(us).all() and (us >= 0).all()):
            raise ConfigError("profile", f"profile '{self.name}' predicted an invalid duration for {label}: "
                                         f"{us[~(np.isfinite(us) & (us >= 0))][0]!r} us")
        return us if slowdown else us * 1e-6

    def _slowdown(self, key: str, X: np.ndarray, group: Sequence[Op], direction: Direction, label: str,
                  names: Sequence[str]) -> np.ndarray:
        """The slowdown over the measured GPU's roofline of an efficiency regressor's ``group``.

        A monotone one (:data:`ROOFLINE_EXPONENT`) predicts ``exp(f(x, log roof))``; its slowdown is
        that times ``roof**(a - 1)``. Outside the roofline's sampled range the roofline in that factor
        is held at the edge, so the efficiency at the edge is held and the time scales with the
        roofline, as for every feature (the trees hold their edge values): the time stays
        non-decreasing in the work across it. Either is never under the smallest slowdown a sample of
        the operator showed: boosted trees add their leaves' corrections and can overshoot between
        samples (a residual add's backward, measured at 1.29-1.45 us, was priced 0.65 us at shapes
        inside its range)."""
        reg = self.regressors[key]
        if "roofline_exponent" in reg.summary:
            assert self.roofline is not None  # the measured GPU's, whose roofline is a feature
            log_roof = np.log(self.roofline.seconds_of(group, direction))
            held = np.clip(log_roof, reg.feature_min[-1], reg.feature_max[-1])
            a = float(reg.summary["roofline_exponent"])
            slowdown = (self._predict(key, np.column_stack([X, log_roof]), label, (*names, "log roofline"))
                        * np.exp((a - 1.0) * held))
        else:
            slowdown = self._predict(key, X, label, names)
        return np.maximum(slowdown, reg.summary.get("slowdown_min", 0.0))

    def op_seconds(self, ops: Sequence[Op], direction: Direction) -> np.ndarray:
        direction = Direction(direction)
        out = np.empty(len(ops))
        groups: dict[OpKind, list[int]] = defaultdict(list)
        for i, op in enumerate(ops):
            groups[op.kind].append(i)
        for kind, idx in groups.items():
            key = _op_key(kind, direction)
            if key not in self.regressors:
                raise NoSamplesError("profile", f"profile '{self.name}' has no samples for operator {kind.value} "
                                                f"({direction.value})", kind.value)
            group = [ops[i] for i in idx]
            X = np.array([features(op) for op in group], dtype=np.float64)
            label = f"operator {kind.value} ({direction.value})"
            if self.regressors[key].summary.get("target") == "slowdown":
                assert self.target is not None  # an efficiency profile always has its roofline
                slowdown = self._slowdown(key, X, group, direction, label, FEATURE_NAMES[kind])
                # The slowdown is over max(launch, work); a GPU-only sample may run under the launch
                # term (a reference, not a bound), so a slowdown under 1 learned where the launch
                # dominated must not take the time under the FLOPs' bound where they dominate
                # (another GPU's roofline, or a larger shape): no operator outruns the tensor cores.
                # The bytes' bound is not floored: a kernel whose data sit in L2 beats HBM bandwidth.
                compute = np.array([self.target.compute_seconds(op, direction) for op in group])
                out[idx] = np.maximum(slowdown * self.target.seconds_of(group, direction), compute)
                continue
            out[idx] = self._predict(key, X, label, FEATURE_NAMES[kind], work_exponents(kind))
            if self.extrapolate == "work" and self.hardware is not None:
                above = (X > self.regressors[key].feature_max).any(axis=1)
                peak, bw = self.hardware
                for i in np.asarray(idx)[above]:
                    bound = max(flops(ops[i], direction) / peak, bytes_moved(ops[i], direction) / bw)
                    out[i] = max(out[i], bound)
        return out

    def collective_seconds(self, colls: Sequence[Collective]) -> np.ndarray:
        out = np.full(len(colls), np.nan)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(colls):
            if c.ranks == 1 or c.entries == 0:
                out[i] = 0.0
            else:
                key = _coll_key(c.kind, c.nodes, c.gpus_per_node)
                if key in self.regressors:
                    groups[key].append(i)
        for key, idx in groups.items():
            c = colls[idx[0]]
            X = np.array([[colls[i].entries] for i in idx], dtype=np.float64)
            label = f"collective {c.kind.value} over {c.nodes}x{c.gpus_per_node} GPUs"
            out[idx] = self._predict(key, X, label, COLLECTIVE_FEATURES, (1.0,))
        return out

    # ------------------------------------------------------------------ reports

    @property
    def quirks(self) -> list[str]:
        return list(self.manifest.get("quirks", []))

    def selection_report(self) -> list[dict]:
        """One row per regressor: operator/collective, direction or group, model, params, MAPE %, n."""
        rows = []
        for key in sorted(self.regressors):
            s = self.regressors[key].summary
            _, what, sub = key.split(":")
            rows.append({"operator": what, "direction": sub, "model": s["kind"], "params": s["params"],
                         "validation_mape_pct": s["validation_mape"], "n": s["n"]})
        return rows

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``manifest.json`` and ``regressors.npz`` atomically into ``path`` (replaced if present)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        entries = []
        with open(tmp / ARRAYS_FILE, "wb") as blob:
            for i, key in enumerate(sorted(self.regressors)):
                reg = self.regressors[key]
                arrays = reg.ensemble.to_arrays()
                meta = json.loads(str(arrays.pop("meta")))
                specs = {}
                for name, arr in arrays.items():
                    arr = np.ascontiguousarray(arr)
                    blob.write(b"\0" * (-blob.tell() % _ALIGN))
                    specs[name] = [blob.tell(), arr.dtype.str, list(arr.shape)]
                    blob.write(arr.tobytes())
                model = CURVE_KIND if isinstance(reg.ensemble, LogLogCurve) else "trees"
                entries.append({"key": key, "index": i, "model": model, **reg.summary, "ensemble": meta,
                                "arrays": specs,
                                "feature_min": reg.feature_min.tolist(), "feature_max": reg.feature_max.tolist()})
        manifest = {**self.manifest, "name": self.name, "format": FORMAT_VERSION, "regressors": entries}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> FittedProfile:
        root = Path(path)
        try:
            manifest = json.loads((root / MANIFEST_FILE).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(str(root), f"not a cached profile: {e}") from None
        if manifest.get("format") != FORMAT_VERSION:
            raise ConfigError(str(root), f"cached profile format {manifest.get('format')!r}, expected {FORMAT_VERSION}")
        if not (root / ARRAYS_FILE).is_file():
            raise ConfigError(str(root), f"not a cached profile: {ARRAYS_FILE} is missing")
        regs = _LazyRegressors(root / ARRAYS_FILE, manifest["regressors"])
        manifest = {k: v for k, v in manifest.items() if k != "regressors"}
        return cls(manifest["name"], regs, manifest)

    def __repr__(self) -> str:
        return f"FittedProfile({self.name!r}, {len(self.regressors)} regressors)"


class _OpsOnly(Mapping[str, Regressor]):
    """A profile's operator regressors without its collective ones (a transfer profile's view)."""

    def __init__(self, inner: Mapping[str, Regressor]) -> None:
        self._inner = inner
        self._keys = [k for k in inner if not k.startswith("coll:")]

    def __getitem__(self, key: str) -> Regressor:
        if key.startswith("coll:"):
            raise KeyError(key)
        return self._inner[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and not key.startswith("coll:") and key in self._inner


class _LazyRegressors(Mapping[str, Regressor]):
    """A cached profile's regressors, each read from its arrays file on first use.

    A scenario needs a third of a profile's regressors or fewer; reading (and decompressing)
    only those keeps a warm ``trainsim predict`` fast. Keys, and every regressor's summary,
    come from the manifest without touching the arrays.
    """

    def __init__(self, arrays: Path, entries: Sequence[dict]) -> None:
        self._arrays = arrays
        self._entries = {e["key"]: e for e in entries}
        self._loaded: dict[str, Regressor] = {}
        self._map: np.ndarray | None = None  # the memory map, opened on first use

    def __getitem__(self, key: str) -> Regressor:
        reg = self._loaded.get(key)
        if reg is None:
            e = self._entries[key]  # KeyError for an unknown key, as a dict
            if self._map is None:
                self._map = np.memmap(self._arrays, dtype=np.uint8, mode="r")
            arrays = {name: np.frombuffer(self._map, dtype=np.dtype(dt), count=math.prod(shape),
                                          offset=off).reshape(shape)
                      for name, (off, dt, shape) in e["arrays"].items()}
            ens: Predictor = (LogLogCurve.from_arrays(arrays) if e.get("model") == CURVE_KIND
                              else TreeEnsemble(**arrays, **e["ensemble"]))
            summary = {k: e[k] for k in ("kind", "params", "validation_mape", "candidate_mape", "n")}
            summary["target"] = e.get("target", "duration")
            for k in ("slowdown_min", "roofline_exponent"):
                if k in e:
                    summary[k] = e[k]
            reg = self._loaded[key] = Regressor(ens, np.asarray(e["feature_min"], dtype=np.float64),
                                                np.asarray(e["feature_max"], dtype=np.float64), summary)
        return reg

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getstate__(self) -> dict[str, Any]:  # a memory map does not pickle; reopened on demand
        return {**self.__dict__, "_map": None}


# ----------------------------------------------------------------------------- fitting


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _fit_one(X: np.ndarray, y: np.ndarray, random_state: int, candidates,
             monotonic_cst: Sequence[int] | None = None, target: str = "duration",
             slowdowns: np.ndarray | None = None, roofline_exponent: float | None = None,
             selection: tuple[int, Sequence[float | None]] | None = None) -> Regressor:
    from trainsim.calibration.select import OperatorRegressor

    # a constrained fit is on log durations (select's module doc: raw ones fit badly under
    # constraints); a slowdown (duration / roofline) is a ratio, fitted on its log as well
    r = OperatorRegressor(candidates=candidates, random_state=random_state, monotonic_cst=monotonic_cst,
                          log_target=monotonic_cst is not None or target == "slowdown",
                          selection=selection).fit(X, y)
    summary = {"kind": r.best_kind_, "params": r.best_params_, "validation_mape": _finite_or_none(r.validation_mape_),
               "candidate_mape": [_finite_or_none(s) for s in r.candidate_mape_], "n": int(r.n_samples_),
               "target": target}
    if target == "slowdown":  # the best efficiency any sample of the operator reached (see FittedProfile._slowdown)
        assert slowdowns is not None
        summary["slowdown_min"] = float(np.min(slowdowns))
        if roofline_exponent is not None:
            summary["roofline_exponent"] = roofline_exponent
    return Regressor(r.to_ensemble(), r.feature_min_.copy(), r.feature_max_.copy(), summary)


def _constant_slowdown(X: np.ndarray, slowdowns: np.ndarray) -> Regressor:
    """An efficiency regressor for an operator whose every sample has the same roofline, the launch
    floor (a residual add's backward hands the output gradient to both inputs and moves nothing,
    ops.bytes_moved): its samples' median slowdown at every shape. Trees on its shape features would
    price noise around the floor, faster with more work as often as slower (docs/efficiency.md,
    "Invariants"). The validation MAPE is the median's, in sample."""
    from trainsim.calibration.forest import constant

    median = float(np.median(slowdowns))
    summary = {"kind": CONSTANT_KIND, "params": {}, "n": int(slowdowns.size), "target": "slowdown",
               "validation_mape": _finite_or_none(100.0 * float(np.mean(np.abs(median / slowdowns - 1.0)))),
               "candidate_mape": [], "slowdown_min": float(np.min(slowdowns))}
    return Regressor(constant(median, X.shape[1], log_target=True), X.min(axis=0), X.max(axis=0), summary)


def _fit_curve(kind: CollKind, X: np.ndarray, y: np.ndarray) -> Regressor:
    from trainsim.calibration.collective_curve import CollectiveCurve

    # all-gather / reduce-scatter shards off a 16-byte multiple are a slower NCCL regime that
    # padded framework buffers avoid (collective_curve's module doc); all-reduce and P2P showed
    # no such split, so every measured size is a knot for them
    align = ALIGN_ENTRIES if kind in (CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER) else None
    c = CollectiveCurve(align_entries=align).fit(X, y)
    summary = {"kind": CURVE_KIND, "params": c.summary_params(), "validation_mape": _finite_or_none(c.validation_mape_),
               "candidate_mape": [], "n": int(c.n_samples_)}
    return Regressor(c.curve_, c.feature_min_.copy(), c.feature_max_.copy(), summary)


def _coll_kind(key: str) -> CollKind | None:
    return CollKind(key.split(":")[1]) if key.startswith("coll:") else None


def fit_profile(name: str, compute_rows: Sequence[ComputeSample], collective_rows: Sequence[CollectiveSample],
                random_state: int = 0, *, progress: Progress = None, n_jobs: int = 2, candidates=None,
                manifest: dict | None = None, on_total: Progress = None,
                collective_model: str = "tree", monotone: bool = False, model: str = "duration",
                roofline: Roofline | None = None,
                selections: Mapping[str, tuple[int, Sequence[float | None]]] | None = None) -> FittedProfile:
    """Fit one regressor per (operator, direction) and per (collective, nodes, GPUs per node).

    ``collective_model``: ``"tree"`` fits every collective group with the operators' tree
    selection (the reference's method); ``"auto"`` fits a group measured at
    ``collective_curve.MIN_SIZES`` or more distinct sizes as a collective curve, and the others
    as trees.

    ``monotone``: fit every tree regressor under the monotone constraints of its feature names
    (``select.monotone_constraints``: more work is never faster); the reference profiles keep
    the default, unconstrained trees, which reproduce the paper.

    ``model``: ``"duration"`` fits each operator's duration; ``"efficiency"`` its slowdown over
    ``roofline`` (calibration.efficiency), unconstrained (``monotone`` applies to durations only).

    ``on_total(n)`` is called once with the number of regressors, then ``progress(1)`` as each is fitted.

    ``selections``: regressor key -> (best candidate, candidate MAPEs) recorded by an earlier fit of
    the same samples, grid and model (calibration.selection_record): that key's candidates are not
    fitted again, only its best on all data (the same estimator; a key not there is selected).

    Regressors are independent and seeded, so the result does not depend on ``n_jobs``
    (regressors are fitted on that many threads; the libraries release the GIL).
    """
    global fit_calls
    if collective_model not in ("tree", "auto"):
        raise ValueError(f"collective_model must be 'tree' or 'auto', got {collective_model!r}")
    if model not in MODELS:
        raise ConfigError("profile.model", f"must be one of {', '.join(MODELS)}, got {model!r}")
    if model in EFFICIENCY_MODELS and roofline is None:
        raise ValueError("an efficiency profile needs the roofline of the GPU its samples were measured on")
    fit_calls += 1
    data: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for s in compute_rows:
        xs, ys = data[_op_key(s.op.kind, s.direction)]
        if roofline is None or model == "duration":
            xs.append(features(s.op))
            ys.append(s.duration_us)
        else:  # (features, log roofline) -> the measured time and its roofline (seconds)
            r = roofline.seconds(s.op, s.direction)
            xs.append((*features(s.op), math.log(r)))
            ys.append((s.duration_us * 1e-6, r))
    for c in collective_rows:
        xs, ys = data[_coll_key(c.coll.kind, c.coll.nodes, c.coll.gpus_per_node)]
        xs.append((float(c.coll.entries),))
        ys.append(c.duration_us)
    if not data:
        raise ConfigError("profile", f"profile '{name}' has no samples")
    keys = sorted(data, key=lambda k: -len(data[k][1]))  # largest first balances the threads
    if on_total:
        on_total(len(keys))

    def job(key: str) -> Regressor:
        xs, ys = data[key]
        X, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        kind = _coll_kind(key)
        if kind is not None and collective_model == "auto" and np.unique(X[:, 0]).size >= MIN_SIZES:
            return _fit_curve(kind, X, y)
        cst = None
        sel = selections.get(key) if selections else None
        slowdown = kind is None and model in EFFICIENCY_MODELS
        if monotone and not slowdown or slowdown and model == "monotone":
            from trainsim.calibration.select import monotone_constraints

            names = COLLECTIVE_FEATURES if kind is not None else FEATURE_NAMES[OpKind(key.split(":")[1])]
            cst = monotone_constraints(names)
        if slowdown:
            time_s, roof = y[:, 0], y[:, 1]
            if model == "efficiency":  # the slowdown on the features, unconstrained
                if np.ptp(roof) == 0:  # no work the roofline counts: no shape feature can explain the time
                    return _constant_slowdown(X[:, :-1], time_s / roof)
                return _fit_one(X[:, :-1], time_s / roof, random_state, candidates, None, "slowdown",
                                slowdowns=time_s / roof, selection=sel)
            # time / roofline**a on (features, log roofline), non-decreasing in the roofline too
            # (ROOFLINE_EXPONENT); the slowdowns' floor is kept for the prediction
            assert cst is not None
            return _fit_one(X, time_s / roof ** ROOFLINE_EXPONENT, random_state, candidates, (*cst, 1),
                            "slowdown", slowdowns=time_s / roof, roofline_exponent=ROOFLINE_EXPONENT, selection=sel)
        return _fit_one(X, y, random_state, candidates, cst, "duration", selection=sel)

    t0 = time.perf_counter()
    regs: dict[str, Regressor] = {}
    if n_jobs > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            for key, reg in zip(keys, pool.map(job, keys), strict=True):
                regs[key] = reg
                if progress:
                    progress(1)
    else:
        for key in keys:
            regs[key] = job(key)
            if progress:
                progress(1)
    meta = {"random_state": random_state, "versions": library_versions(), "features": features_fingerprint(),
            "collective_model": _collective_tag(collective_model), "monotone": monotone, "model": model,
            **({"roofline": roofline.to_dict()} if model in EFFICIENCY_MODELS and roofline is not None else {}),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "fit_seconds": round(time.perf_counter() - t0, 3),
            **(manifest or {})}
    return FittedProfile(name, regs, meta)


# ----------------------------------------------------------------------------- loading


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "trainsim" / "profiles"


def shipped_profiles() -> list[str]:
    if not SHIPPED_DIR.is_dir():
        return []
    return sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def features_fingerprint() -> str:
    """Changes whenever the Table I feature definitions do, so a cached profile is refitted."""
    from trainsim.operators import ops

    code = ops.features.__code__
    blob = repr(sorted((k.value, v) for k, v in ops.FEATURE_NAMES.items())) + code.co_code.hex() + repr(code.co_consts)
    # an efficiency profile's targets are measured / roofline time: FLOP and byte counts change them
    for fn in (ops.forward_flops, ops.bytes_moved):
        blob += fn.__code__.co_code.hex() + repr(fn.__code__.co_consts)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _collective_tag(collective_model: str) -> str:
    """Recorded in the manifest: a cache fitted under another collective policy or curve version is refitted."""
    return f"auto-curve{CURVE_VERSION}" if collective_model == "auto" else collective_model


def _cache_valid(path: Path, hash_: str, random_state: int, collective_model: str = "tree",
                 monotone: bool = False, model: str = "duration", gpu: str | None = None,
                 candidates: str = "paper") -> bool:
    try:
        m = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (m.get("format") == FORMAT_VERSION and m.get("data_hash") == hash_
            and m.get("random_state") == random_state and m.get("versions") == library_versions()
            and m.get("features") == features_fingerprint()
            and m.get("collective_model") == _collective_tag(collective_model)
            # a manifest from before the flag was unconstrained: still valid for a reference
            # profile, refitted for a sample directory
            and m.get("monotone", False) == monotone and m.get("model", "duration") == model
            and m.get("candidates", "paper") == _grid_tag(candidates)
            and (gpu is None or _roofline_current(m.get("roofline"), gpu)) and (path / ARRAYS_FILE).exists())


def _grid_tag(candidates: str) -> str:
    """The manifest's name of a candidate grid: "paper", or "fast-<hash of its parameters>" (a changed
    grid refits the caches fitted with the old one)."""
    if candidates != "fast":
        return candidates
    from trainsim.calibration.grids import FAST_CANDIDATES

    return "fast-" + hashlib.sha256(repr(FAST_CANDIDATES).encode()).hexdigest()[:8]


def candidate_grid(tag: str) -> tuple[tuple[str, dict], ...]:
    """The candidate grid a manifest's ``candidates`` tag names (:func:`_grid_tag`)."""
    if tag == "paper":
        from trainsim.calibration.select import DEFAULT_CANDIDATES

        return DEFAULT_CANDIDATES
    if tag == _grid_tag("fast"):
        from trainsim.calibration.grids import FAST_CANDIDATES

        return FAST_CANDIDATES
    raise ValueError(f"no candidate grid is tagged {tag!r} now")


def _roofline_current(record: Any, gpu: str) -> bool:
    """A cached efficiency profile's roofline is the GPU's current datasheet figures (a corrected
    preset refits it)."""
    from trainsim.topology.hardware import GPU_PRESETS

    spec = GPU_PRESETS.get(gpu)
    return (isinstance(record, dict) and spec is not None and record.get("gpu") == gpu
            and record.get("peak_flops") == spec.peak_flops and record.get("peak_fp8") == spec.peak_fp8
            and record.get("mem_bw") == spec.mem_bw)


def _fit_cached(name: str, hash_: str, source: str, loader, cache_dir, progress: Progress,
                random_state: int, on_total: Progress = None, collective_model: str = "tree",
                monotone: bool = False, model: str = "duration", gpu: str | None = None,
                launch_s: float | None = None, candidates: str = "paper", record_file: Path | None = None,
                reselect: bool = False) -> FittedProfile:
    """Load the cached fit or fit and cache it (``candidates``: "paper", select.DEFAULT_CANDIDATES, or
    "fast", grids.FAST_CANDIDATES). An efficiency or monotone ``model`` needs ``gpu`` (a
    topology preset); its launch floor is ``launch_s``, else the fastest sample. A fit that
    ``record_file`` holds (calibration.selection_record) refits its recorded choices only, unless
    ``reselect``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[-60:]
    tag = {"efficiency": "-eff", "monotone": "-mono"}.get(model, "")
    path = cache_root(cache_dir) / f"{slug}{tag}-{hash_[:12]}"
    if _cache_valid(path, hash_, random_state, collective_model, monotone, model,
                    gpu if model in EFFICIENCY_MODELS else None, candidates):
        try:
            return FittedProfile.load(path)
        except (ConfigError, OSError, KeyError, ValueError) as e:
            warnings.warn(f"cached profile {path} unreadable ({e}); refitting", stacklevel=3)
    from trainsim.calibration.reference import find_quirks, warn_quirks

    compute, colls = loader()
    quirks = find_quirks(list(compute), list(colls), name)
    warn_quirks(quirks)
    roofline = None
    if model in EFFICIENCY_MODELS:
        if gpu is None:
            raise ValueError("an efficiency profile needs its GPU")
        roofline = Roofline.for_gpu(gpu, launch_floor_s(compute, launch_s))
    grid_tag = _grid_tag(candidates)
    grid = candidate_grid(grid_tag)
    selections = None
    if record_file is not None and not reselect:
        from trainsim.calibration.selection_record import read_selection, signature

        selections = read_selection(record_file, signature(hash_, grid_tag, random_state, model,
                                                           monotone, _collective_tag(collective_model)))
    prof = fit_profile(name, compute, colls, random_state, progress=progress, on_total=on_total, candidates=grid,
                       manifest={"data_hash": hash_, "source": source, "quirks": quirks,
                                 "candidates": grid_tag,
                                 "selection": "searched" if selections is None else f"recorded ({record_file})"},
                       collective_model=collective_model, monotone=monotone, model=model, roofline=roofline,
                       selections=selections)
    try:
        prof.save(path)
    except OSError as e:
        warnings.warn(f"could not write the profile cache {path}: {e}; the next run refits", stacklevel=3)
    return prof


def _with_transferred_compute(prof: FittedProfile, source: str, path: Path, meta: dict, reference_dir, cache_dir,
                              progress: Progress, random_state: int, on_total: Progress,
                              model: str = "efficiency", reselect: bool = False) -> FittedProfile:
    """A sample directory of measured collectives whose ``meta.json`` says
    ``"compute_transfer_from": "<profile>"``: its operators are that profile's efficiencies on this
    directory's GPU (its datasheet roofline, from ``meta``, its meta.json), its collectives its own."""
    if source.startswith("transfer:") or Path(source).resolve() == path.resolve():
        raise ConfigError(str(path / META_FILE), f"compute_transfer_from must name a measured profile, got {source!r}")
    gpu = gpu_of_samples(meta, str(path / META_FILE))
    base = load_profile(source, reference_dir, cache_dir, progress, random_state=random_state, on_total=on_total,
                        model=model, reselect=reselect)
    assert base.roofline is not None
    ops = base.with_target(Roofline.for_gpu(gpu, base.roofline.launch_s), prof.name)
    merged = FittedProfile(prof.name, _Merged(ops.regressors, prof.regressors),
                           {**prof.manifest, "model": model, "compute_transfer_from": source,
                            "roofline": ops.target.to_dict() if ops.target else None})
    merged.roofline = base.roofline  # the efficiencies' own GPU; merged.target prices on this one
    merged.target = ops.target
    return merged


def _own_or_borrowed(path: Path, file: str, meta: dict, key: str) -> Path | None:
    """``path/file`` if the sample directory has it, else the same file of the shipped profile its
    ``meta.json`` names under ``key`` (a measurement of another GPU's host that stands in, said
    in that meta.json), else None."""
    if (path / file).is_file():
        return path / file
    source = meta.get(key)
    if source is None:
        return None
    shipped = _shipped(source)
    if shipped is None or not (shipped / file).is_file():
        raise ConfigError(str(path / META_FILE), f"{key} must name a shipped profile that has {file}, got {source!r}")
    return shipped / file


def _shipped(name: object) -> Path | None:
    """The folder of the shipped profile ``name`` (a plain name, no path), or None."""
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", name)):
        return None
    folder = SHIPPED_DIR / name
    return folder if folder.is_dir() else None


class _Merged(Mapping[str, Regressor]):
    """Two profiles' regressors as one mapping (the first wins on a shared key)."""

    def __init__(self, first: Mapping[str, Regressor], second: Mapping[str, Regressor]) -> None:
        self._maps = (first, second)
        self._keys = list(dict.fromkeys([*first, *second]))

    def __getitem__(self, key: str) -> Regressor:
        for m in self._maps:
            if key in m:
                return m[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return any(key in m for m in self._maps)


#: the measured profile a ``transfer:<gpu>`` profile takes its efficiencies from
TRANSFER_SOURCE = "h100-sxm-bf16"
MODELS = ("duration", "efficiency", "monotone")


def default_model(name: str) -> str:
    """``profile.model`` when a scenario does not say: the paper's duration trees for the reference
    profiles (their reproduction), efficiency for everything measured by this project."""
    return "duration" if name.startswith("reference:") else "efficiency"


def load_profile(name: str, reference_dir: str | None = None, cache_dir: str | None = None,
                 progress: Progress = None, gpu_specs: Mapping[str, tuple[float, float]] | None = None,
                 random_state: int = 0, on_total: Progress = None, model: str | None = None,
                 reselect: bool = False):
    """Resolve a profile name to a :class:`operators.duration.DurationModel`.

    A profile that must be fitted (no valid cache) calls ``on_total(n)`` with its regressor
    count, then ``progress(1)`` per regressor fitted; a cache hit calls neither.

    * ``reference:Perlmutter`` / ``reference:Vista``: the reference samples found via
      ``reference_dir`` or ``$TRAINSIM_REFERENCE_DATA``; fitted once, then cached.
    * ``roofline:<gpu>``: a :class:`RooflineProfile` from ``gpu_specs[gpu] =
      (peak_flops, mem_bw)``, which the caller supplies (the GPU presets live in topology).
    * a path to a sample directory (compute.csv / collectives.csv / meta.json): fitted, cached.
    * a shipped name: the sample directory ``calibration/profiles/<name>/``, fitted, cached.
    * ``transfer:<gpu>``: :data:`TRANSFER_SOURCE`'s learned efficiencies on ``<gpu>``'s datasheet
      roofline (topology.hardware presets); operators only.

    ``model``: ``duration`` or ``efficiency`` regressors (None: :func:`default_model`; a sample
    directory whose ``meta.json`` names a GPU without a datasheet preset then falls back to duration).

    A fit that is not cached uses the model selection recorded for it (a sample directory's
    ``selection.json``, the reference profiles' ``profiles/reference_selection.json``; see
    calibration.selection_record) unless ``reselect``: the same regressors, fitted without their
    candidates' validation fits.
    """
    auto = model is None
    model = default_model(name) if model is None else model
    if model not in MODELS:
        raise ConfigError("profile.model", f"must be one of {', '.join(MODELS)}, got {model!r}")
    if name.startswith("transfer:"):
        from trainsim.topology.hardware import GPU_PRESETS

        gpu = name.split(":", 1)[1].strip().lower()
        if gpu not in GPU_PRESETS:
            raise ConfigError("profile.name", f"unknown GPU {gpu!r} in {name!r}; known: "
                                              f"{', '.join(sorted(GPU_PRESETS))}")
        if model not in EFFICIENCY_MODELS:
            raise ConfigError("profile.model", f"a transfer profile is an efficiency model (efficiency or "
                                               f"monotone); got {model!r}")
        source = load_profile(TRANSFER_SOURCE, reference_dir, cache_dir, progress, random_state=random_state,
                              on_total=on_total, model=model, reselect=reselect)
        assert source.roofline is not None
        return source.with_target(Roofline.for_gpu(gpu, source.roofline.launch_s), f"transfer:{gpu}")
    if name.startswith("roofline:"):
        gpu = name.split(":", 1)[1]
        specs = dict(gpu_specs or {})
        if gpu not in specs:
            raise ConfigError("profile", f"unknown GPU '{gpu}' for a roofline profile; known: "
                                         f"{', '.join(sorted(specs)) or 'none given'}")
        peak, bw = specs[gpu]
        return RooflineProfile(name, peak, bw)
    if name.startswith("reference:"):
        from trainsim.calibration.reference import CLUSTERS, load_reference, reference_files, resolve_reference_dir

        cluster = name.split(":", 1)[1]
        canon = next((c for c in CLUSTERS if c.lower() == cluster.lower()), None)
        if canon is None:
            raise ConfigError("profile", f"unknown reference cluster '{cluster}'; known: "
                                         f"{', '.join('reference:' + c for c in CLUSTERS)}")
        root = resolve_reference_dir(reference_dir)
        op_files, nccl_files = reference_files(root, canon)
        hash_ = data_hash(op_files + nccl_files, root)
        from trainsim.calibration.selection_record import REFERENCE_RECORD

        return _fit_cached(f"reference:{canon}", hash_, str(root / canon),
                           lambda: load_reference(root, canon), cache_dir, progress, random_state, on_total,
                           model=model, gpu=REFERENCE_GPUS[canon], record_file=REFERENCE_RECORD, reselect=reselect)
    path = Path(name).expanduser()
    shipped = _shipped(name)
    if not path.is_dir() and shipped is not None:
        path = shipped
    if path.is_dir():
        files = [path / f for f in (COMPUTE_FILE, COLLECTIVE_FILE, META_FILE, LAUNCH_FILE) if (path / f).exists()]
        if not any(f.name not in (META_FILE, LAUNCH_FILE) for f in files):
            raise ConfigError(str(path), f"holds neither {COMPUTE_FILE} nor {COLLECTIVE_FILE}")

        def loader():
            samples = load_sample_dir(path)
            return samples.compute, samples.collectives

        # measured tables (collectives_bench: many sizes per group) interpolate as curves, and
        # their trees are monotone in the work; the reference profiles above keep the
        # reference's unconstrained trees, which the paper cases depend on
        meta = read_meta(path / META_FILE) if (path / META_FILE).is_file() else {}
        gpu = None
        fitted_model = model if (path / COMPUTE_FILE).exists() else "duration"  # collectives only: no roofline
        if fitted_model in EFFICIENCY_MODELS:
            if auto and gpu_for_meta(meta) is None:
                fitted_model = "duration"  # samples of a GPU without datasheet peaks: no roofline to scale
            else:
                gpu = gpu_of_samples(meta, str(path / META_FILE))
        from trainsim.calibration.fsdp_copies import FSDP_COPIES_FILE, load_fsdp_copies
        from trainsim.calibration.host_overhead import HOST_FILE, load_host_overhead
        from trainsim.calibration.selection_record import RECORD_FILE

        # the files another shipped profile lends, resolved before the fit: a meta.json naming one
        # that is not there is one error now, not after seconds of fitting
        host_file = _own_or_borrowed(path, HOST_FILE, meta, "host_overhead_from")
        interference_file = _own_or_borrowed(path, INTERFERENCE_FILE, meta, "interference_from")
        copies_file = _own_or_borrowed(path, FSDP_COPIES_FILE, meta, "fsdp_copies_from")
        prof = _fit_cached(name, data_hash(files, path), str(path.resolve()), loader, cache_dir, progress,
                           random_state, on_total, collective_model="auto", monotone=True, model=fitted_model, gpu=gpu,
                           launch_s=measured_launch_s(path), candidates="fast", record_file=path / RECORD_FILE,
                           reselect=reselect)
        source = meta.get("compute_transfer_from")
        if not (path / COMPUTE_FILE).exists() and isinstance(source, str):
            prof = _with_transferred_compute(prof, source, path, meta, reference_dir, cache_dir, progress,
                                             random_state, on_total,
                                             model if model in EFFICIENCY_MODELS else "efficiency", reselect)
        if host_file is not None:  # the runtimes' host cost on the machine the samples came from
            prof.host_overhead = load_host_overhead(host_file)
            from trainsim.calibration.rank_spread import RANK_LAG_FILE, load_rank_lag, with_rank_lag

            if (path / RANK_LAG_FILE).is_file():  # this GPU's hosts: how far their slowest rank lags
                prof.host_overhead = with_rank_lag(prof.host_overhead, *load_rank_lag(path / RANK_LAG_FILE))
            from trainsim.calibration.host_factors import HOST_FACTORS_FILE, load_host_factors, with_host_factors

            if (path / HOST_FACTORS_FILE).is_file():  # this GPU's hosts against the (borrowed) lines: the band
                prof.host_overhead = with_host_factors(prof.host_overhead, load_host_factors(path / HOST_FACTORS_FILE))
        if interference_file is not None:  # how compute and NCCL slow each other on that GPU
            from trainsim.calibration.interference import load_interference

            prof.interference = load_interference(interference_file)
        if copies_file is not None:  # FSDP2's copy kernels on that GPU
            prof.fsdp_copies = load_fsdp_copies(copies_file)
        from trainsim.calibration.power_cap import POWER_FILE, load_power_cap

        if (path / POWER_FILE).is_file():  # how the GPU's power cap slows its kernels under sustained load
            prof.power_cap = load_power_cap(path / POWER_FILE)
        return prof
    known = ["reference:Perlmutter", "reference:Vista", "roofline:<gpu>", "transfer:<gpu>", *shipped_profiles()]
    raise ConfigError("profile", f"unknown profile '{name}'; known: {', '.join(known)}, or a sample directory")
