"""The power cap under sustained load: how much slower compute-bound kernels run than their samples.

The operator samples are bursts (10 warm-up and 10 timed runs after an idle GPU). A training run keeps
the GPU busy for minutes, and an H100 or H200 SXM then sits at its 700 W cap: the SM clock falls
(1,245-1,500 MHz under sustained GEMMs, against 1,980) and the tensor-core kernels slow down, while
memory-bound kernels, which draw less power and barely depend on the SM clock, do not. How much
depends on the mix: the more of the time the GPU spends in tensor-core work, the higher its mean
power and the deeper the throttle.

``validation/probe_gpu_spread.py`` measures it. Its mixes ``mix_<dtype>_c<N>`` run an 8192-cube GEMM,
then N copies of 256 MiB, over and over; D is the GEMM's share of the mix's time (from the burst times
of the GEMM and of the copy alone) and g how much slower the GEMM part runs in the second half of 10-15
s of sustained load than in a burst (the copies at their own sustained time). Measured (docs/efficiency.md):
on an H100, bf16 g = 1.10 at D = 1, 1.06 at 0.80, 1.03 at 0.66 and none at 0.5; FP8 1.13 at 1.
On an H200 the throttle starts lower (1.08 at D = 0.57).

The model is the measured curve itself, per GPU and GEMM precision (:func:`fit_curve`): the points
averaged per D, linear between them, no slowdown below the lowest (its segment extended down to
g = 1). A run applies it per pipeline stage (sim.costs.build_costs):
an operator's tensor-core seconds are its FLOPs at the probe GEMM's burst rate (no more than its
duration), the time that GEMM would draw its power for them; D is a stage's tensor-core seconds over
the iteration, and each operator's time grows by ``(g - 1)`` times its tensor-core seconds.
Profiles without ``power_cap.json`` (the reference ones, and any sample folder without it) are
priced as their samples are; a transfer profile carries the measured GPU's curve (:meth:`PowerCapModel.on`).

GPUs of one kind do not throttle alike: under the same sustained GEMM their times differ by a relative
standard deviation ``spread`` (0.91 % over four H100s, 1.02 % over five H200s, :func:`gpu_spread`), the copies,
which do not throttle, by 0.1 %. A synchronous job runs at its slowest GPU's pace. :meth:`PowerCapModel.slowest_of`
prices a job of n GPUs so: each GPU's capped time varies by ``spread`` scaled by how deep the throttle is
at that D ((g(D) - 1) / (g(1) - 1)), and the job takes the expected maximum of n such GPUs
(:func:`expected_max_normal`: 0.56 standard deviations for 2, 2.34 for 64, 3.25 for 1,024).

What fills the rest of the GPU's time matters: beside GELUs the GEMM throttles as much as alone at every
share measured (D 0.1 to 1, bf16 and FP8, seven H200s: a level, ``fit_curve(level=True)``), beside copies
x1.02 at D = 0.39. Where measured (the H200; validation/probe_power_class.py), each operator kind has a
filler class w in [0, 1] (:func:`filler_classes`: where a GEMM beside it throttles between the same chip's
copy and GELU curves), a stage takes its operators' time-weighted class, and g(D) moves that fraction of
the way from the copy curve to the GELU curve (:meth:`PowerCapModel.factor`). And the harness timed the
samples of tensor-core kernels longer than a few milliseconds partly capped already: with the cap's
measured onset (``onset_s``) :meth:`PowerCapModel.sample_cap` replays its protocol, and sim.costs divides
those samples by it before putting the run's own cap back.

    python -m trainsim.calibration.power_cap validation/gpu_spread_h100_1gpu_machine{AJ,AI,AL,AO}/spread.jsonl \\
        --out calibration/profiles/h100-sxm-bf16/power_cap.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainsim.operators.errors import ConfigError

POWER_FILE = "power_cap.json"
PRECISIONS = ("bf16", "fp8")  # the GEMM kinds measured (fp16 tensor-core GEMMs draw as bf16 ones do)
# the harness's protocol (calibration.harness: WARMUP, ITERS, robust_mean's keep), which sample_cap replays
HARNESS_WARMUP, HARNESS_ITERS, HARNESS_KEEP = 10, 10, 5

#: operator kinds priced by a measured kind of the same family (validation/probe_power_class.py measured the
#: Hugging Face step's kernels): a GEMM's time off the tensor cores as the MLP-up GEMM's, a fused attention as
#: the HF attention's, a norm, an activation, a residual add, a loss or an optimizer step as the measured one
CLASS_FAMILIES: dict[str, tuple[str, ...]] = {
    "hf_mlp_up": ("hf_qkv", "hf_dense", "hf_mlp_down", "hf_lm_head", "linear1", "linear2", "linear3", "linear4",
                  "linear_final", "baddbmm", "bmm", "fp8_linear1", "fp8_linear2", "fp8_linear3", "fp8_linear4"),
    "hf_attention": ("flash_attn",),
    "hf_layernorm": ("layernorm", "rmsnorm"),
    "gelu": ("swiglu", "swiglu_fused"),
    "hf_residual": ("res_add",),
    "hf_loss": ("cross_entropy",),
    "hf_optimizer": ("optimizer_first", "optimizer_middle", "optimizer_last"),
}
FAMILY_OF = {kind: measured for measured, kinds in CLASS_FAMILIES.items() for kind in kinds}


@dataclass(frozen=True)
class Curve:
    """The measured slowdown g of compute-bound work at tensor-core share D: linear between knots
    ``(D, g)`` (ascending in both), 1 at and below the first (where the lowest measured segment,
    extended down, reaches no slowdown)."""

    knots: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        ds = [k[0] for k in self.knots]
        gs = [k[1] for k in self.knots]
        ascending = all(b > a for a, b in zip(ds, ds[1:], strict=False))
        rising = all(b >= a for a, b in zip(gs, gs[1:], strict=False))
        if (len(self.knots) < 2 or any(not (0.0 <= d <= 1.0) for d in ds) or not ascending or not rising
                or gs[0] != 1.0 or not all(map(math.isfinite, gs))):
            raise ConfigError(POWER_FILE, f"a curve needs at least two knots (D, g), D in [0, 1] ascending, "
                                          f"g non-decreasing from 1; got {self.knots!r}")

    def factor(self, share: float) -> float:
        ds, gs = zip(*self.knots, strict=True)
        return float(np.interp(min(1.0, max(0.0, share)), ds, gs))


@dataclass(frozen=True)
class PowerCapModel:
    """The measured curves of one GPU, per GEMM precision, and the rate (FLOP/s) of the probe's GEMM in
    its burst: D counts an operator's FLOPs at that rate, the time the probe's GEMM would draw its
    power for them."""

    gpu: str
    curves: dict[str, Curve]
    reference_flops: dict[str, float]
    # relative standard deviation of the sustained lone GEMM's time across GPUs (:func:`gpu_spread`)
    spread: float = 0.0
    gpus: int = 1  # the job whose slowest GPU :meth:`factor` prices (:meth:`slowest_of`)
    # Where measured (the H200): the curves with GELUs for the other work (per precision), each kind's place
    # between the copy and GELU curves (``kind.direction`` -> w in [0, 1], :func:`filler_classes`), and the
    # cap's onset under back-to-back load (start, full, s), by which the harness's samples of long
    # tensor-core kernels were timed partly capped already (:meth:`sample_cap`). Empty / None: the copy
    # curves alone, the samples as bursts.
    gelu_curves: dict[str, Curve] = dataclasses.field(default_factory=dict)
    filler_class: dict[str, float] = dataclasses.field(default_factory=dict)
    onset_s: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for k, v in self.reference_flops.items():
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(POWER_FILE, f"reference_flops.{k} must be a positive rate, got {v!r}")
        if not (math.isfinite(self.spread) and 0.0 <= self.spread < 0.5):
            raise ConfigError(POWER_FILE, f"spread must be a fraction in [0, 0.5), got {self.spread!r}")
        for k, w in self.filler_class.items():
            if not (math.isfinite(w) and 0.0 <= w <= 1.0):
                raise ConfigError(POWER_FILE, f"filler_class.{k} must be in [0, 1], got {w!r}")
        if self.onset_s is not None and not (0.0 <= self.onset_s[0] < self.onset_s[1] < 10.0):
            raise ConfigError(POWER_FILE, f"onset_s must be (start, full) seconds, start < full, got {self.onset_s!r}")

    def _curve_factor(self, precision: str, share: float, w: float) -> tuple[float, float]:
        """(g(D), g(1)) of one GPU: the copy curve, moved a fraction ``w`` of the way to the GELU curve
        where that precision has one."""
        key = precision if precision in self.curves else "bf16"  # a precision not measured: bf16's curves
        curve = self.curves.get(key)
        if curve is None:
            return 1.0, 1.0
        g, top = curve.factor(share), curve.knots[-1][1]
        gelu = self.gelu_curves.get(key)
        if gelu is not None and w > 0.0:
            g += w * (gelu.factor(share) - g)
            top += w * (gelu.knots[-1][1] - top)
        return g, top

    def factor(self, precision: str, share: float, w: float = 0.0) -> float:
        """g(D) of ``precision`` beside other work of filler class ``w`` (0: the probe's copies, 1: its
        GELUs; :meth:`filler_weight`); for a job of several GPUs, its slowest GPU's."""
        g, top = self._curve_factor(precision, share, w)
        if self.gpus > 1 and self.spread > 0 and g > 1.0:  # g > 1 somewhere: the curve's last knot too
            g *= 1.0 + self.spread * (g - 1.0) / (top - 1.0) * expected_max_normal(self.gpus)
        return g

    def filler_weight(self, kind: str, direction: str) -> float:
        """The measured filler class of an operator kind's work beside the tensor cores (its time off them):
        its own ``kind.direction``, else the measured kind its family is priced by (:data:`CLASS_FAMILIES`),
        that kind's other direction where only one was measured; 0 (a copy, as the curves assume) where
        nothing of its family was measured."""
        table = self.filler_class
        if not table:
            return 0.0
        for k in dict.fromkeys((kind, FAMILY_OF.get(kind, kind))):  # its own, then its family's (once if none)
            for d in (direction, *(x for x in ("fwd", "bwd", "update") if x != direction)):
                w = table.get(f"{k}.{d}")
                if w is not None:
                    return w
        return 0.0

    def sample_cap(self, precision: str, duration_s: float, tensor_core_s: float, w: float) -> float:
        """How much slower than a burst the harness timed a sample of ``duration_s`` whose tensor-core work
        is ``tensor_core_s`` (1: not at all). The harness queues 10 runs, then times 10 more (the mean of the
        middle five, calibration.harness): run i of the timed ones spans (10 + i) to (11 + i) durations
        into back-to-back load, when the cap has set in by ``clip((t - start) / (full - start), 0, 1)``
        of the sustained slowdown that kernel's own stream reaches (its own share D = tensor-core over
        duration, its own filler class)."""
        if self.onset_s is None or not (duration_s > 0) or not (tensor_core_s > 0):
            return 1.0
        start, full = self.onset_s
        reached = [min(1.0, max(0.0, ((HARNESS_WARMUP + i + 0.5) * duration_s - start) / (full - start)))
                   for i in range(HARNESS_ITERS)]
        lo = (HARNESS_ITERS - HARNESS_KEEP) // 2  # runs only get slower: the sorted middle five are these
        rho = sum(reached[lo:lo + HARNESS_KEEP]) / HARNESS_KEEP
        if rho == 0.0:
            return 1.0
        share = min(1.0, tensor_core_s / duration_s)
        g, _ = self._curve_factor(precision, share, w)
        return 1.0 + (g - 1.0) * rho * share

    def slowest_of(self, gpus: int) -> PowerCapModel:
        """The same GPU kind in a synchronous job of ``gpus`` GPUs: :meth:`factor` gives its slowest
        GPU's slowdown (the module doc)."""
        return dataclasses.replace(self, gpus=max(1, int(gpus)))

    def on(self, gpu: str, bf16_ratio: float, fp8_ratio: float) -> PowerCapModel:
        """The same curves for a GPU whose tensor cores are ``bf16_ratio`` (``fp8_ratio``) times as fast
        (a transfer profile, calibration.profile.FittedProfile.with_target): the probe's GEMM runs at the
        same efficiency there, so its rate scales with the peak, and a share D means the same on both.
        That the other GPU throttles as this one does at the same D is an assumption (docs/efficiency.md)."""
        ratios = {"bf16": bf16_ratio, "fp8": fp8_ratio}
        rates = {k: v * ratios[k] for k, v in self.reference_flops.items() if ratios.get(k, 0) > 0}
        return dataclasses.replace(self, gpu=f"{gpu}, {self.gpu}'s curve", reference_flops=rates)

    def tensor_core_seconds(self, precision: str, flops: float) -> float:
        """``flops`` at the probe GEMM's burst rate of that precision (bf16's where not measured)."""
        rate = self.reference_flops.get(precision) or self.reference_flops.get("bf16")
        return flops / rate if rate else 0.0


#: the mixes' other work: the probe's copies, or GELUs over as many bytes (elementwise work with arithmetic)
FILLERS = {"copy": ("copy_256mib", "c"), "gelu": ("gelu_256mib", "e")}
#: the probe's mixes: the GEMM then N fillers (32 and 64 since machines DO and DP: D down to 0.1)
MIX_FILLERS = (1, 2, 4, 8, 16, 32, 64)


def mix_points(rows: Sequence[dict[str, Any]], filler: str = "copy") -> list[tuple[str, float, float]]:
    """(precision, D, g) of every mix with ``filler`` (:data:`FILLERS`) and lone GEMM in a
    probe_gpu_spread.py table, per GPU and round."""
    lone, tag = FILLERS[filler]

    def get(kind: str, rnd: int, gpu: int, field: str) -> float | None:
        hit = [r[field] for r in rows if r["kernel"] == kind and r["round"] == rnd and r["gpu"] == gpu]
        return float(hit[0]) if hit and hit[0] is not None and math.isfinite(hit[0]) else None

    out = []
    for rnd, gpu in sorted({(r["round"], r["gpu"]) for r in rows}):
        cb, cw = get(lone, rnd, gpu, "burst_s"), get(lone, rnd, gpu, "window_s")
        for precision in PRECISIONS:
            gb, gw = get(f"gemm_{precision}_8192", rnd, gpu, "burst_s"), get(f"gemm_{precision}_8192", rnd, gpu,
                                                                             "window_s")
            if gb is None or gw is None:
                continue
            out.append((precision, 1.0, gw / gb))
            if cb is None or cw is None:
                continue
            for n in MIX_FILLERS:
                mw = get(f"mix_{precision}_{tag}{n}", rnd, gpu, "window_s")
                if mw is not None:
                    out.append((precision, gb / (gb + n * cb), (mw - n * cw) / gb))
    return out


def fit_curve(points: Iterable[tuple[float, float]], level: bool = False) -> Curve:
    """The knots of the measured points: mean g per D (D to 0.02), made non-decreasing in D (pooled
    where a lower D measured slower: the burst's own noise, about 2 %), never under 1; below the
    lowest D the first segment is extended down to g = 1 (where the data say nothing, the nearest
    measured slope). ``level``: the points are one level (a filler that holds the chip at its cap alone,
    the GELU: the GEMM beside it runs at the capped clock whatever its share), their mean from the lowest
    share measured to 1, down to no slowdown at D = 0 below it."""
    raw = list(points)
    pts = sorted((round(d / 0.02) * 0.02, g) for d, g in raw)
    if len({d for d, _ in pts}) < 2:
        raise ConfigError(POWER_FILE, "need points at two shares D at least to draw the curve")
    bins: list[list[float]] = []  # [D, sum g, n]
    for d, g in pts:
        if bins and abs(bins[-1][0] - d) < 1e-9:
            bins[-1][1] += g
            bins[-1][2] += 1
        else:
            bins.append([d, g, 1])
    # pool adjacent violators: (sum of g, points, their Ds) per block
    blocks: list[tuple[float, float, list[float]]] = [(b[1], b[2], [b[0]]) for b in bins]
    if level:
        blocks = [(sum(b[0] for b in blocks), sum(b[1] for b in blocks), [d for b in blocks for d in b[2]])]
    i = 0
    while i < len(blocks) - 1:
        if blocks[i][0] / blocks[i][1] >= blocks[i + 1][0] / blocks[i + 1][1]:  # level parts are one block
            a, b = blocks[i], blocks.pop(i + 1)
            blocks[i] = (a[0] + b[0], a[1] + b[1], a[2] + b[2])
            i = max(0, i - 1)
        else:
            i += 1
    if len(blocks) == 1:  # flat where measured (an elementwise filler keeps the GPU at its cap): from the
        # lowest share measured to 1 at that level, and down to no slowdown at D = 0, where the GPU computes nothing
        g = max(1.0, blocks[0][0] / blocks[0][1])
        low = min(d for d, _ in raw)
        flat = [(0.0, 1.0), (low, g)] + ([(1.0, g)] if low < 1.0 else [])
        return Curve(tuple((round(d, 3), round(v, 4)) for d, v in flat))
    knots = [(float(np.mean(ds)), max(1.0, total / count)) for total, count, ds in blocks]
    (d1, g1), (d2, g2) = knots[0], knots[1]
    if g1 > 1.0:  # extend the lowest segment down to no slowdown
        d_zero = d1 - (g1 - 1.0) * (d2 - d1) / (g2 - g1) if g2 > g1 else d1
        knots.insert(0, (max(0.0, d_zero), 1.0))
        if knots[0][0] == 0.0 and knots[1][0] == 0.0:
            knots.pop(0)
    while len(knots) > 2 and knots[1][1] == 1.0:  # one knot at g = 1 is enough
        knots.pop(0)
    return Curve(tuple((round(d, 3), round(g, 4)) for d, g in knots))


@functools.lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals]: the integral of x n phi(x) Phi(x)^(n-1) on a fine grid
    (0 for one, 0.5642 for two, 1.0294 for four, 3.2482 for 1,024)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-10.0, 10.0, 20001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    y = x * n * pdf * cdf ** (n - 1)
    return float(np.sum((y[1:] + y[:-1]) * 0.5 * np.diff(x)))


def gpu_spread(rows: Sequence[dict[str, Any]]) -> tuple[float, int]:
    """The relative standard deviation of the lone 8192-cube GEMMs' sustained time across the GPUs of the
    tables, and over how many GPUs: each GPU's time (``window_s``, its mean over rounds) relative to its
    precision's mean over the GPUs, pooled over the precisions (n - 1 degrees of freedom each: a
    property of the GPU, not of the GEMM's type). A GPU is its ``uuid`` (or its table and index); 0
    where fewer than two GPUs measured a GEMM."""
    squares, dof, gpus = 0.0, 0, set()
    for precision in PRECISIONS:
        per: dict[str, list[float]] = {}
        for r in rows:
            w = r.get("window_s")
            if r.get("kernel") == f"gemm_{precision}_8192" and isinstance(w, float) and math.isfinite(w):
                per.setdefault(r.get("uuid") or f"{r.get('source')}:{r.get('gpu')}", []).append(w)
        times = {g: statistics.mean(v) for g, v in per.items()}
        if len(times) >= 2:
            mean = statistics.mean(times.values())
            squares += sum((t / mean - 1.0) ** 2 for t in times.values())
            dof += len(times) - 1
            gpus.update(times)
    return (math.sqrt(squares / dof), len(gpus)) if dof else (0.0, len(gpus))


def fit_power_cap(paths: Sequence[str], filler: str = "copy") -> dict[str, Any]:
    """The ``power_cap.json`` record of the probe tables at ``paths`` (one GPU kind): each precision's
    curve from its mixes with ``filler`` (:data:`FILLERS`; a precision without them keeps its copy
    mixes')."""
    rows = _read_tables(paths)
    names = sorted({r.get("name", "?") for r in rows})
    if len(names) != 1:
        raise ConfigError("power cap", f"the tables must come from one GPU kind, got {names}")
    points: dict[str, list[tuple[float, float]]] = {}
    fillers: dict[str, str] = {}
    for kind in dict.fromkeys((filler, "copy")):
        found: dict[str, list[tuple[float, float]]] = {}
        for path in paths:
            for precision, d, g in mix_points([r for r in rows if r["source"] == path], kind):
                found.setdefault(precision, []).append((round(d, 4), round(g, 4)))
        for precision, pts in found.items():
            if precision not in points and any(d < 1.0 for d, _ in pts):  # mixes with this filler, not lone GEMMs only
                points[precision], fillers[precision] = pts, kind
    curves = {k: fit_curve(v, level=fillers[k] == "gelu") for k, v in points.items()
              if len({round(d, 2) for d, _ in v}) >= 2}
    if not curves:
        raise ConfigError("power cap", "no GEMM with its sustained and burst times in the tables")
    rates = {k: float(np.median([r["burst_rate"] for r in rows if r["kernel"] == f"gemm_{k}_8192"]))
             for k in curves}
    spread, spread_gpus = gpu_spread(rows)
    return {"gpu": names[0], "sources": list(paths), "points": points,
            "curves": {k: [list(knot) for knot in c.knots] for k, c in curves.items()},
            "reference_flops": {k: round(v, -9) for k, v in rates.items()}, "filler": fillers,
            "spread": round(spread, 5), "spread_gpus": spread_gpus,
            "model": "g(D): tensor-core work's sustained over burst time at tensor-core share D of the GPU's "
                     "time, linear between the knots, 1 below the first; spread: the sustained GEMM's relative "
                     "standard deviation across GPUs, for a job's slowest GPU (calibration/power_cap.py)"}


def _read_tables(paths: Sequence[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        try:
            rows += [dict(json.loads(line), source=p) for line in Path(p).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as e:
            raise ConfigError(p, f"cannot read the probe table: {e}") from None
    return rows


def filler_classes(paths: Sequence[str]) -> dict[str, float]:
    """Each measured kind's filler class w (``kind.direction``): where the GEMM's slowdown beside it lies
    between the same chip's copy curve (w = 0) and GELU curve (w = 1), at the mix's D; the mean over the
    tables (validation/probe_power_class.py), clamped to [0, 1]. Within one table a filler's D and g use its
    sustained time alone (the GPU's pace at full clock; its burst carries the host's launches), for the
    references and the kinds alike: D = GEMM / (GEMM + N filler), g = (mix - N filler) / GEMM. A mix where
    the two curves are within 0.02 of each other says nothing of w and is skipped."""
    found: dict[str, list[float]] = {}
    for path in paths:
        _, places = class_places(_read_tables([path]), path)
        for kind, _, g, gc, ge in places:
            if ge - gc >= 0.02:
                found.setdefault(kind, []).append((g - gc) / (ge - gc))
    return {k: round(min(1.0, max(0.0, statistics.mean(v))), 3) for k, v in sorted(found.items())}


def class_places(rows: Sequence[dict[str, Any]], source: str = "table"
                 ) -> tuple[dict[str, Curve], list[tuple[str, float, float, float, float]]]:
    """One power-class table's copy and GELU curves, and per kind (D, g of its mix, the copy and GELU
    curves at that D), as :func:`filler_classes` reads them."""
    by = {r["kernel"]: r for r in rows}
    gemm = by.get("gemm_bf16_8192")
    if gemm is None:
        raise ConfigError(source, "no gemm_bf16_8192 row: not a power-class table")
    gb = gemm["burst_s"]

    def point(mix: dict[str, Any], n: int, filler: dict[str, Any]) -> tuple[float, float]:
        return gb / (gb + n * filler["window_s"]), (mix["window_s"] - n * filler["window_s"]) / gb

    curves = {}
    for name, (kernel, tag) in FILLERS.items():
        if kernel not in by:
            raise ConfigError(source, f"no {kernel} row: a power-class table needs the {name} filler alone")
        pts = [(1.0, gemm["window_s"] / gb)] + [point(by[f"mix_bf16_{tag}{n}"], n, by[kernel])
                                                for n in MIX_FILLERS if f"mix_bf16_{tag}{n}" in by]
        curves[name] = fit_curve(pts, level=name == "gelu")
    places = []
    for kernel, mix in by.items():
        if kernel.startswith("mix:") and kernel[4:] in by:  # a mix whose kind alone was not measured says nothing
            d, g = point(mix, int(mix["n"]), by[kernel[4:]])
            places.append((kernel[4:], d, g, curves["copy"].factor(d), curves["gelu"].factor(d)))
    return curves, places


def load_power_cap(path: str | Path) -> PowerCapModel:
    """A profile directory's ``power_cap.json`` (ConfigError naming the file)."""
    try:
        return load_power_cap_record(json.loads(Path(path).read_text()))
    except ConfigError as e:
        raise ConfigError(str(path), e.message) from None
    except (OSError, ValueError) as e:
        raise ConfigError(str(path), f"unreadable power-cap table: {e}") from None


def load_power_cap_record(data: dict[str, Any]) -> PowerCapModel:
    """The model of a ``power_cap.json`` record (ConfigError naming what is wrong)."""
    try:
        curves = {str(k): Curve(tuple((float(d), float(g)) for d, g in v)) for k, v in data["curves"].items()}
        rates = {str(k): float(v) for k, v in data["reference_flops"].items()}
        gelu = {str(k): Curve(tuple((float(d), float(g)) for d, g in v))
                for k, v in data.get("gelu_curves", {}).items()}
        onset = data.get("onset_s")
        return PowerCapModel(str(data["gpu"]), curves, rates, float(data.get("spread", 0.0)), gelu_curves=gelu,
                             filler_class={str(k): float(v) for k, v in data.get("filler_class", {}).items()},
                             onset_s=(float(onset[0]), float(onset[1])) if onset is not None else None)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ConfigError(POWER_FILE, f"unreadable power-cap table: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainsim.calibration.power_cap", description=__doc__.split("\n")[0])
    p.add_argument("tables", nargs="+", help="validation/probe_gpu_spread.py JSONL tables of one GPU kind")
    p.add_argument("--out", required=True, help=f"the profile directory's {POWER_FILE}")
    p.add_argument("--filler", choices=sorted(FILLERS), default="copy",
                   help="the mixes' other work the curves are fitted on (a precision without such mixes keeps copies)")
    p.add_argument("--gelu", nargs="+", default=[], metavar="TABLE",
                   help="tables with GEMM:GELU mixes: their curves are the record's gelu_curves")
    p.add_argument("--classes", nargs="+", default=[], metavar="TABLE",
                   help="validation/probe_power_class.py tables: each kind's filler class (filler_classes)")
    p.add_argument("--onset-ms", nargs=2, type=float, metavar=("START", "FULL"),
                   help="the cap's onset under back-to-back load (validation/probe_sample_onset.py --analyse)")
    args = p.parse_args(argv)
    try:
        record = fit_power_cap(args.tables, args.filler)
        if args.gelu:  # the same fit on the GELU mixes; a precision that has none keeps no GELU curve
            gelu = fit_power_cap(args.gelu, "gelu")
            record["gelu_sources"] = list(args.gelu)
            record["gelu_curves"] = {k: v for k, v in gelu["curves"].items() if gelu["filler"][k] == "gelu"}
        if args.classes:
            record["class_sources"] = list(args.classes)
            record["filler_class"] = filler_classes(args.classes)
        if args.onset_ms:
            record["onset_s"] = [args.onset_ms[0] / 1e3, args.onset_ms[1] / 1e3]
        load_power_cap_record(record)
    except ConfigError as e:
        print(f"error: {e}")
        return 2
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for k, knots in record["curves"].items():
        print(f"{record['gpu']} {k} ({len(record['points'][k])} points): g(D) through "
              + ", ".join(f"({d:.2f}, {g:.3f})" for d, g in knots))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
