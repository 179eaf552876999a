"""The hardware bound an operator's efficiency is measured against, on one GPU.

``profile.model: efficiency`` (issue 9) fits, per operator and direction, the *slowdown* of a
measured duration over the GPU's roofline time instead of the duration itself::

    roofline(op) = max(launch, flops(op) / peak, bytes(op) / mem_bw)
    slowdown(op) = duration(op) / roofline(op)          (1 / efficiency)

and prices an operator as ``roofline(op) * slowdown(x)``, ``x`` its Table I features. A tree
predicts a constant inside each leaf and the edge leaf's value outside the sampled range, so the
*efficiency* is what stays flat there, while the duration keeps scaling with the FLOPs or bytes
(a raw-duration tree prices micro-batch 64 like 16). The selection's MAPE on the slowdown is the
MAPE on the duration (the roofline is a per-row constant), so ``profile show`` compares the two
models on one scale.

The peaks are the datasheet's dense figures (:mod:`topology.hardware`): FP8 GEMM kinds against
the FP8 peak, everything else against the BF16/FP16 tensor peak. The byte count is
:func:`operators.ops.bytes_moved`, a lower bound on HBM traffic; small tensors served from L2
can beat it, which the fitted slowdown (below 1 there) absorbs: the roofline is a reference, not a
promise. ``launch`` is the shortest kernel the GPU was measured to run (one CUDA-event-timed
one-element kernel, ``launch.json`` of a sample directory; else the fastest sample of the
profile). It is a max, not a sum: it keeps a pass-through backward (a residual add's gradient
moves no bytes) on a finite scale, and a shape far below the sampled range from being priced at
nothing.

Transfer (``transfer:<gpu>``): the slowdown learned on a measured GPU, times the roofline of
another GPU from its datasheet. What that cannot see: a different SM count (wave quantization),
cache size, kernel library or clock behaviour; docs/gpus.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind, bytes_moved, flops

FP8_GEMMS = frozenset({OpKind.FP8_LINEAR1, OpKind.FP8_LINEAR2, OpKind.FP8_LINEAR3, OpKind.FP8_LINEAR4})
LAUNCH_FILE = "launch.json"

#: which datasheet GPU each reference cluster's samples were taken on (method.md, Clusters)
REFERENCE_GPUS = {"Perlmutter": "a100-sxm4-80gb", "Vista": "gh200"}


@dataclass(frozen=True)
class Roofline:
    """One GPU's bound: dense peaks (FLOP/s), HBM bandwidth (bytes/s) and the launch floor (s)."""

    gpu: str
    peak_flops: float
    peak_fp8: float
    mem_bw: float
    launch_s: float

    def __post_init__(self) -> None:
        for field in ("peak_flops", "mem_bw", "launch_s"):
            value = getattr(self, field)
            if not (isinstance(value, float | int) and np.isfinite(value) and value > 0):
                raise ConfigError(f"roofline.{field}", f"must be a positive number, got {value!r}")

    @classmethod
    def for_gpu(cls, gpu: str, launch_s: float) -> Roofline:
        """The bound of a :data:`topology.hardware.GPU_PRESETS` GPU with a given launch floor."""
        from trainsim.topology.hardware import GPU_PRESETS

        spec = GPU_PRESETS.get(gpu)
        if spec is None:
            raise ConfigError("profile", f"unknown GPU {gpu!r}; known: {', '.join(sorted(GPU_PRESETS))}")
        return cls(gpu, spec.peak_flops, spec.peak_fp8, spec.mem_bw, float(launch_s))

    def seconds(self, op: Op, direction: Direction) -> float:
        """``max(launch, flops / peak, bytes / mem_bw)`` of one operator."""
        return max(self.launch_s, self.work_seconds(op, direction))

    def work_seconds(self, op: Op, direction: Direction) -> float:
        """``max(flops / peak, bytes / mem_bw)``: the bound without the launch floor."""
        return max(self.compute_seconds(op, direction), bytes_moved(op, direction) / self.mem_bw)

    def compute_seconds(self, op: Op, direction: Direction) -> float:
        """``flops / peak`` (the FP8 peak for the FP8 GEMMs): the tensor cores' bound alone."""
        if op.kind in FP8_GEMMS:
            if self.peak_fp8 <= 0:
                raise ConfigError("profile", f"GPU {self.gpu} has no FP8 tensor cores (its datasheet states no "
                                             f"FP8 rate); training.precision fp8 cannot be priced on it")
            return flops(op, direction) / self.peak_fp8
        return flops(op, direction) / self.peak_flops

    def seconds_of(self, ops: Sequence[Op], direction: Direction) -> np.ndarray:
        return np.array([self.seconds(op, direction) for op in ops], dtype=np.float64)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Roofline:
        try:
            return cls(str(data["gpu"]), float(data["peak_flops"]), float(data["peak_fp8"]),
                       float(data["mem_bw"]), float(data["launch_s"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError("profile", f"bad roofline record {data!r}: {e}") from None


def measured_launch_s(sample_dir: Path) -> float | None:
    """The launch floor a device batch measured (``launch.json``: median of a one-element kernel)."""
    path = sample_dir / LAUNCH_FILE
    if not path.is_file():
        return None
    try:
        value = float(json.loads(path.read_text())["median_us"]) * 1e-6
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(str(path), f"unreadable launch floor: {e}") from None
    if not (np.isfinite(value) and value > 0):
        raise ConfigError(str(path), f"launch floor must be positive, got {value!r} s")
    return value


def launch_floor_s(compute: Sequence, measured: float | None = None) -> float:
    """The launch floor of a profile: the measured one (:func:`measured_launch_s`), else its fastest sample."""
    if measured is not None:
        return measured
    if not compute:
        raise ConfigError("profile", "an efficiency profile needs operator samples")
    return min(s.duration_us for s in compute) * 1e-6


def gpu_for_meta(meta: dict) -> str | None:
    """The GPU preset a sample directory was measured on (its ``meta.json`` ``gpu`` name), or None."""
    from trainsim.topology.hardware import gpu_for_device_name

    name = meta.get("gpu")
    return gpu_for_device_name(name) if isinstance(name, str) else None


def gpu_of_samples(meta: dict, where: str) -> str:
    """:func:`gpu_for_meta`, or one clear error naming ``where``."""
    gpu = gpu_for_meta(meta)
    if gpu is None:
        name = meta.get("gpu")
        raise ConfigError(where, f"meta.json names GPU {name!r}, which has no datasheet preset: "
                                 f"profile.model efficiency needs its peaks (use profile.model: duration)")
    return gpu


# ----------------------------------------------------------------------------- the roofline profile's table

ROOFLINE_TABLE = Path(__file__).resolve().parent / "profiles" / "roofline_efficiency.json"
#: a sample counts as "large" (its kernel saturates the GPU) when its roofline time is in this top fraction
LARGE_FRACTION = 0.25


def saturated_slowdowns(samples: Sequence, roofline: Roofline) -> dict[str, float]:
    """Per ``kind:direction``, the median slowdown (measured / roofline time) of the samples whose
    roofline time is in the top :data:`LARGE_FRACTION` of that operator's: what a large shape of it
    reaches. The roofline profile prices every shape with it (shape-independent, so small shapes,
    which run further from the bound, are priced too fast; docs/gpus.md)."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        bound = roofline.seconds(s.op, s.direction)
        groups.setdefault(f"{s.op.kind.value}:{s.direction.value}", []).append((bound, s.duration_us * 1e-6))
    out = {}
    for key, rows in sorted(groups.items()):
        bounds = np.array([b for b, _ in rows])
        times = np.array([t for _, t in rows])
        large = bounds >= np.quantile(bounds, 1.0 - LARGE_FRACTION)
        out[key] = float(np.median(times[large] / bounds[large]))
    return out


def load_roofline_table(path: Path = ROOFLINE_TABLE) -> dict:
    try:
        table = json.loads(path.read_text())
        slowdowns = {str(k): float(v) for k, v in table["slowdowns"].items()}
        launch = float(table["launch_s"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(str(path), f"unreadable roofline efficiency table: {e}") from None
    if not all(np.isfinite(v) and v > 0 for v in slowdowns.values()) or not launch > 0:
        raise ConfigError(str(path), "slowdowns and launch_s must be positive")
    return {**table, "slowdowns": slowdowns, "launch_s": launch}


def write_roofline_table(source: str = "h100-sxm-bf16", path: Path = ROOFLINE_TABLE) -> dict:
    """Learn the roofline profile's table from a shipped sample directory (``python -m
    trainsim.calibration.efficiency``): its GPU's roofline, its launch floor, the saturated slowdowns."""
    from trainsim.calibration.samples import COMPUTE_FILE, data_hash, load_sample_dir

    root = Path(__file__).resolve().parent / "profiles" / source
    samples = load_sample_dir(root)
    gpu = gpu_of_samples(samples.meta, str(root))
    launch = launch_floor_s(samples.compute, measured_launch_s(root))
    roofline = Roofline.for_gpu(gpu, launch)
    table = {"source": source, "gpu": gpu, "data_hash": data_hash([root / COMPUTE_FILE], root)[:16],
             "rule": f"median of measured / roofline time over the top {LARGE_FRACTION:.0%} of each operator's "
                     f"samples by roofline time (calibration.efficiency.saturated_slowdowns)",
             "launch_s": launch, "slowdowns": saturated_slowdowns(samples.compute, roofline)}
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


if __name__ == "__main__":
    t = write_roofline_table()
    print(f"wrote {ROOFLINE_TABLE}: {len(t['slowdowns'])} operators from {t['source']} ({t['gpu']}), "
          f"launch {t['launch_s'] * 1e6:.1f} us")
