"""The host (CPU) cost of PyTorch runtimes, measured with shapes whose GPU work is negligible.

A training step costs the GPU its kernels and the host the Python and dispatcher work that issues
them. For eager PyTorch on one GPU the host is far ahead of the GPU at the shapes people train, so
only the kernels count (operators are priced by the GPU profile). DTensor tensor parallelism and
FSDP2 wrap every parameter in a ``DTensor``: each operator then goes through sharding propagation
and redistribution in Python, several milliseconds per layer, and at moderate shapes the host, not
the GPU, sets the pace.

``validation/train_hf_parallel.py`` measured each layout at tiny shapes (hidden 128, sequence 64,
one sequence per micro-batch: ``validation/hf_parallel_shapes_host.csv``), where an iteration is
all host time. This module fits, over those rows,

    host seconds per iteration = factor(machine) * (per_iteration_s + per_layer_s * layer_steps)

with one line per runtime and one speed factor per machine shared by every runtime measured on
it. ``layer_steps`` is ``layers * micro_batches`` (``per_layer_s``: one layer's forward and
backward on one micro-batch), and for a pipeline of ``pp`` equal stages ``layers / pp * m``: the
stages' hosts issue their schedules ahead of the GPUs and never wait for each other, so the
slowest stage's host total is the critical path (:func:`pipeline_steps`). The
runtime of a row is its layout's: ``eager`` (1gpu), ``ddp`` (dp: DDP around the same eager model,
with its forward wrapper, its bucket hooks and its all-reduce launches: on the same machines its tiny
rows take a median 1.22x (dp2) and 1.31x (dp4) one GPU's, so it has a line of its own, and the eager
model's head and tail, ``operators.stages.WRAPPED_RUNTIMES``), ``dtensor_tp`` (tp), ``fsdp2`` (fsdp),
``fsdp2_tp`` (fsdp x tp), ``eager_pp`` and
``dtensor_tp_pp`` (the pipelining runtime's stages: no attention mask, so no host-GPU
synchronisation per micro-batch, and a per-layer cost of their own).

A micro-batch's host work outside its layers: the Hugging Face model's head (embedding, the
causal mask, the rotary tables) and tail (final norm, LM head, loss) in the forward and the
backward. ``validation/probe_head_host.py`` times them on the GPU's host at a tiny shape, in units
of one layer's forward and backward host time (``--head-tail`` reads its JSON lines; their
medians go into the ``eager`` runtime's ``head_tail``). Measured on an H100 host
(``validation/head_host_h100_machineY/``): head forward 0.37, tail forward 0.31, head backward
0.10, tail backward 0.35, 1.13 layers per micro-batch. With them the eager line's layer-steps
are ``micro_batches * (layers + 1.13)``, and the flow shop (``sim/host_time.py``) gives each part its
own share, so the GPU waits out the head's host work after the synchronisation at a micro-batch's
start. (Fitted without them, the line's per-micro-batch term is absorbed into the per-layer and
per-iteration terms: a least-squares fit with a free per-micro-batch term over the same rows gives
1.09 layers, agreeing with the probe.) The probe also times a layer's forward at 0.41 of its host
time; the flow shop keeps the even split between forward and backward (docs/multi_gpu.md says
why: with 0.41 the tables got worse, and what makes them disagree is not known).

DTensor TP runs other ends: a vocabulary-parallel embedding, a column-parallel LM head whose
logits stay sharded, and the cross-entropy under ``loss_parallel``, each a DTensor operator.
``validation/probe_parallel_head_host.py`` times them in the trainer itself (``--head-tail
dtensor_tp=JSONL``; ``fsdp2_tp=JSONL`` for FSDP2 over TP, whose root unit adds its hooks; a runtime
given several files takes the median over all their lines). On four H200 hosts (2026-11-28):
DTensor TP 1.01 layers per micro-batch (tp2 and tp4 alike: head forward 0.27, tail forward 0.35,
head backward 0.06, tail backward 0.33), FSDP2 x TP 1.33. Fitted without them, the per-micro-batch
cost sat in the intercept: 29.7 ms per iteration for DTensor TP and 56 ms for FSDP2 x TP, where the
probe times the update (optimizer step and ``zero_grad``) at 2-5 and 3-7 ms; with them the
intercepts are 1.3 and 9.7 ms. In a pipeline the first stage runs the head and the last the tail
(:func:`pipeline_steps`); the eager pipeline's, measured on pp2 (machine BJ) and pp4 (CF), are small:
head 0.19, tail 0.43 layers (no causal mask; the loss alone on the last stage); the pipelined DTensor
stages' on pp2xtp2 (CF): head 0.18, tail 0.64 (the vocabulary-parallel embedding; the LM head and the
loss under ``loss_parallel``).

Host and GPU work overlap: PyTorch issues kernels asynchronously, so a step takes the longer of
the two (``overlap: overlapped``; a "serial" runtime would add them). Checked on the GPUs with
validation/probe_host.py: the only host-GPU synchronisations are one per micro-batch (Hugging
Face's causal-mask construction) and one per iteration, the caching allocator makes no
cudaMalloc/cudaFree calls in steady state, and garbage collection changes nothing systematic.

The host cost is the machine's, not the shape's: built side by side in one process and timed in
turn, tiny and real shapes take the same host time (validation/probe_host_split.py --alternate),
while lent machines of one kind differ by up to a third (the same tiny tp2 run: 0.272 s on one,
0.373 s on another). Each row's ``lease`` names its machine; the factors are normalised to a
geometric mean of 1, so the lines are the kind's typical machine, and a runtime measured on one
machine only is corrected by the factor its other runtimes give that machine (docs/multi_gpu.md).

``validation/train_3d.py`` (Megatron's layer in plain PyTorch ops, ``framework: megatron`` with
``training.kernels: eager``) measured its own lines the same way (``--sweep-micro-batches`` at
hidden 256, sequence 128: ``validation/device/train3d_host.sh``): ``megatron_eager`` (one GPU, DP),
``megatron_eager_tp`` (its tensor-parallel autograd functions and all-reduces, mp2 and mp4 alike),
``megatron_eager_pp`` and ``megatron_eager_tp_pp``. A pipeline's critical path runs through its
stage of most layers (the encoder split is uneven). That trainer never synchronises host and GPU
inside an iteration, so its host runs ahead over a whole micro-batch (``overlap: ahead``: only the
micro-batch's host excess over its GPU work shows, not each step's). Its rows came from machines
that measured no train_hf_parallel.py runtime, so their factors are normalised among themselves
(:func:`_machine_groups`).

    python -m trainsim.calibration.host_overhead validation/measured_hf_parallel_h100_host_*.csv \\
        validation/train3d_host_h*/tiny.csv --head-tail validation/head_host_h100_machineY/head_host.jsonl \\
        --head-tail dtensor_tp=validation/parallel_head_host_h200_2gpu_machineBE/parallel_head_host.jsonl \\
        --head-tail dtensor_tp=validation/parallel_head_host_h200_2gpu_machineBF/parallel_head_host.jsonl \\
        --head-tail dtensor_tp=validation/parallel_head_host_h200_4gpu_machineBG/parallel_head_host.jsonl \\
        --head-tail dtensor_tp=validation/parallel_head_host_h200_4gpu_machineBH/parallel_head_host.jsonl \\
        --head-tail fsdp2_tp=validation/parallel_head_host_h200_4gpu_machineBG/parallel_head_host.jsonl \\
        --head-tail fsdp2_tp=validation/parallel_head_host_h200_4gpu_machineBH/parallel_head_host.jsonl \\
        --head-tail eager_pp=validation/parallel_head_host_h200_2gpu_machineBJ/parallel_head_host.jsonl \\
        --head-tail eager_pp=validation/parallel_head_host_h200_4gpu_machineCF/parallel_head_host.jsonl \\
        --head-tail dtensor_tp_pp=validation/parallel_head_host_h200_4gpu_machineCF/parallel_head_host.jsonl \\
        --out calibration/profiles/h100-sxm-bf16/host_overhead.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainsim.operators.errors import ConfigError
from trainsim.operators.partition import partition_encoders
from trainsim.operators.stages import WRAPPED_RUNTIMES, megatron_runtime

HOST_FILE = "host_overhead.json"
#: beside HOST_FILE: what a checkpointed layer costs the host beyond re-issuing its forward
#: (``checkpoint_s`` per runtime; validation/fit_checkpoint_overhead.py)
CHECKPOINT_FILE = "checkpoint_overhead.json"
OVERLAP = {"eager": "overlapped", "ddp": "overlapped", "dtensor_tp": "overlapped", "fsdp2": "overlapped",
           "fsdp2_tp": "overlapped",
           "eager_pp": "overlapped", "dtensor_tp_pp": "overlapped",
           # train_3d.py's Megatron layer in eager ops: no host-GPU synchronisation inside an iteration,
           # so the host runs ahead of the GPU across a micro-batch's forward and backward
           **{megatron_runtime(mp, pp): "ahead" for mp in (1, 2) for pp in (1, 2)}}


#: the parts of a micro-batch outside its layers (validation/probe_head_host.py), in layers
HEAD_TAIL_PARTS = ("head_fwd", "tail_fwd", "head_bwd", "tail_bwd")
#: the runtimes a head and tail may be given for (Hugging Face's model in plain eager PyTorch:
#: validation/probe_head_host.py; under DTensor TP, alone or inside FSDP2, and the pipelining runtime's
#: stages: validation/probe_parallel_head_host.py). Not pipelined, every micro-batch runs both ends; a
#: pipeline's first stage runs the head and its last the tail (:func:`pipeline_steps`)
HEAD_TAIL_RUNTIMES = frozenset({"eager", "ddp", "dtensor_tp", "fsdp2_tp", "eager_pp", "dtensor_tp_pp"})


def read_head_tail(paths: str | Sequence[str], runtime: str = "eager") -> dict[str, float]:
    """The medians over head-and-tail probes' JSON lines of ``runtime`` in ``paths`` (one file or
    several: one per machine; ConfigError naming the file).

    validation/probe_head_host.py's lines have no ``layout`` and are the eager runtime's;
    validation/probe_parallel_head_host.py's name their layout, and count for its runtime."""
    import statistics

    files = [paths] if isinstance(paths, str) else list(paths)
    mine: list[dict] = []
    for path in files:
        try:
            lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            of_rt = [r for r in lines if (runtime_of(str(r["layout"])) if "layout" in r else "eager") == runtime]
            if not of_rt:
                raise ValueError(f"no line of the {runtime} runtime")
            # a pipeline stage's line has its own end only (the first stage's head, the last's tail)
            mine += [{k: float(r[k]) for k in HEAD_TAIL_PARTS if k in r} for r in of_rt]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(path, f"not head-and-tail probe output: {e}") from None
    try:
        out = {k: float(statistics.median(r[k] for r in mine if k in r)) for k in HEAD_TAIL_PARTS}
    except statistics.StatisticsError:
        raise ConfigError(",".join(files),
                          f"no line of the {runtime} runtime gives all of {', '.join(HEAD_TAIL_PARTS)}") from None
    if not all(0 <= v < 10 for v in out.values()):
        raise ConfigError(",".join(files), f"head and tail must be 0 to 10 layers, got {out}")
    return out


def parse_head_tail_arg(arg: str) -> tuple[str, str]:
    """``--head-tail``'s ``[RUNTIME=]JSONL`` as (runtime, path); a plain path is the eager runtime's."""
    rt, sep, path = arg.partition("=")
    if not sep:
        return "eager", arg
    if rt not in HEAD_TAIL_RUNTIMES:
        raise ConfigError("--head-tail", f"runtime {rt!r} takes no head and tail (one of {sorted(HEAD_TAIL_RUNTIMES)})")
    return rt, path


def runtime_of(layout: str) -> str | None:
    """The runtime a train_hf_parallel.py layout runs under (None: FSDP inside a pipeline, which
    this table does not describe)."""
    pipelined = "pp" in layout
    if "fsdp" in layout:
        return None if pipelined else ("fsdp2_tp" if "tp" in layout else "fsdp2")
    if "tp" not in layout and not pipelined and layout.startswith("dp"):
        return "ddp"  # DistributedDataParallel around the eager model
    base = "dtensor_tp" if "tp" in layout else "eager"
    return f"{base}_pp" if pipelined else base


def pipeline_degree(layout: str) -> int:
    """The pp of a train_hf_parallel.py layout name ("pp2xtp2" -> 2; 1 when not pipelined)."""
    m = re.search(r"pp(\d+)", layout)
    return int(m.group(1)) if m else 1


def layer_steps(layout: str, layers: float, micro_batches: float) -> float:
    """The layer-steps on an iteration's host critical path, what its host time grows with.

    Not pipelined: every layer's forward and backward for every micro-batch, ``layers * m``.
    Pipelined: the slowest stage's host total, ``m`` steps of its layers (:func:`pipeline_steps`).
    """
    if pipeline_degree(layout) == 1:
        return layers * micro_batches
    return pipeline_steps(layout, int(layers), micro_batches, 0.0, 0.0)


def pipeline_steps(layout: str, layers: int, micro_batches: float, head: float, tail: float) -> float:
    """The layer-steps on a pipeline's host critical path when its first stage also runs the head and
    its last the tail (in layers per micro-batch): the slowest stage's ``m`` steps. Its stages' hosts
    issue their schedules ahead of the GPUs and never wait for each other
    (:data:`trainsim.operators.stages.ISSUE_AHEAD_PIPELINES`), so the fill and the drain are the
    GPUs' alone; on the tiny host rows of pp2xtp2 and pp4 (four machines), pp2 (seven) and train_3d.py's
    pipelines (four), ``m`` steps fit better than the ``m + pp - 1`` of a 1F1B slot chart, and a pp2
    kernel timeline shows each stage's host launching four to six steps ahead of its GPU
    (docs/multi_gpu.md, "A pipeline's host runs ahead"). Stages as validation/train_hf_parallel.py
    splits the layers (even, the remainder on the last stages)."""
    pp = pipeline_degree(layout)
    base, extra = divmod(layers, pp)
    steps = [base + (1 if s >= pp - extra else 0) + (head if s == 0 else 0.0) + (tail if s == pp - 1 else 0.0)
             for s in range(pp)]
    return micro_batches * max(steps)


def row_runtime(row: dict[str, str]) -> tuple[str | None, float]:
    """A tiny-shape row's runtime and layer-steps: a train_3d.py row (it has an ``mp`` column) runs
    :func:`operators.stages.megatron_runtime`, its pipeline's host critical path the ``m`` steps of its
    stage of most layers (its split is uneven; :func:`pipeline_steps`); a train_hf_parallel.py row runs
    :func:`runtime_of` its layout."""
    layers, m = float(row["layers"]), float(row["micro_batches"])
    if "mp" in row:
        pp = int(row["pp"])
        return megatron_runtime(int(row["mp"]), pp), max(partition_encoders(int(layers), pp)) * m
    return runtime_of(row["layout"]), layer_steps(row["layout"], layers, m)


def row_points(rows: Iterable[dict[str, str]],
               ends: Mapping[str, Mapping[str, float]]) -> list[tuple[str, float, float, str]]:
    """(runtime, layer-steps, measured seconds, machine) of each row of a runtime this module fits;
    ``ends``: the runtimes' head and tail in layers (a pipeline's first stage runs the head, its last
    the tail; without a pipeline every micro-batch runs both)."""
    pts: list[tuple[str, float, float, str]] = []
    for r in rows:
        rt, steps = row_runtime(r)
        if rt is None:
            continue
        if rt in ends and pipeline_degree(r["layout"]) > 1:
            e = ends[rt]
            steps = pipeline_steps(r["layout"], int(float(r["layers"])), float(r["micro_batches"]),
                                   e["head_fwd"] + e["head_bwd"], e["tail_fwd"] + e["tail_bwd"])
        elif rt in ends:
            steps += float(r["micro_batches"]) * sum(ends[rt].values())
        pts.append((rt, steps, float(r["min_s"]), r.get("lease") or "?"))
    return pts


def point_arrays(pts: Sequence[tuple[str, float, float, str]]) -> tuple[list[str], list[str], Any, Any, Any, Any, Any]:
    """:func:`row_points` as arrays: (runtimes, machines, layer-steps, seconds, each point's runtime
    index, its machine index, its weight). A point weighs 1 / the points of its runtime on its machine,
    so every runtime measured on a machine counts the same there, however many rows it has."""
    import numpy as np

    runtimes = sorted({p[0] for p in pts})
    names = sorted({p[3] for p in pts})
    rt_idx = np.array([runtimes.index(p[0]) for p in pts])
    m_idx = np.array([names.index(p[3]) for p in pts])
    count: dict[tuple[int, int], int] = {}
    for a, b in zip(rt_idx.tolist(), m_idx.tolist(), strict=True):
        count[a, b] = count.get((a, b), 0) + 1
    w = np.array([1.0 / count[a, b] for a, b in zip(rt_idx.tolist(), m_idx.tolist(), strict=True)])
    return runtimes, names, np.array([p[1] for p in pts]), np.array([p[2] for p in pts]), rt_idx, m_idx, w


def machine_scales(y: Any, line: Any, w: Any, m_idx: Any, machines: int) -> Any:
    """Each machine's least-squares scale of the ``line`` values onto the measured ``y`` (weights
    ``w``): its host factor against those lines."""
    import numpy as np

    return np.array([(w * y * line)[m_idx == j].sum() / (w * line * line)[m_idx == j].sum()
                     for j in range(machines)])


def fit_host_overhead(rows: Iterable[dict[str, str]],
                      head_tail: Mapping[str, dict[str, float]] | None = None,
                      typical: str | None = None) -> dict[str, dict[str, Any]]:
    """Per runtime: ``per_iteration_s``, ``per_layer_s``, ``overlap``, ``rows``, ``leases`` and the
    ``lease_factors`` of the machines it was measured on (see the module doc). ``head_tail`` (per
    runtime of :data:`HEAD_TAIL_RUNTIMES`, in layers, :data:`HEAD_TAIL_PARTS`) adds that runtime's
    micro-batch head and tail to its layer-steps and is stored in its entry.

    A row's ``lease`` (the machine it ran on; default ``"?"``) is a machine whose host runs at its
    own speed, the same for every runtime: time = factor(lease) * (per_iteration_s + per_layer_s *
    layer_steps). Alternating least squares fits each runtime's line on its rows scaled by their
    machine's factor (every machine weighing the same, however many rows it has) and each factor
    on its machine's rows of every runtime; the factors are normalised to a geometric mean of 1,
    so the lines are the machine kind's typical host. A runtime measured on one machine only is
    still corrected by that machine's factor, which the other runtimes measured there fix.

    ``typical``: a text in the ``device`` column (e.g. ``H200``). The lines are then that kind's
    typical host: in each group of machines (:func:`_machine_groups`) that has machines of that
    device, the factors are normalised to a geometric mean of 1 over those machines alone (the
    other machines still shape the lines through their rows). A GPU kind's lent hosts are not the
    other kind's: the H200 machines' tiny rows ran 8-20 % slower than the H100 line.
    """
    import numpy as np

    ends = dict(head_tail or {})
    for rt in ends:
        if rt not in HEAD_TAIL_RUNTIMES:
            raise ConfigError("host overhead", f"runtime {rt}: takes no head and tail")
    for rt, inner in WRAPPED_RUNTIMES.items():
        if rt not in ends and inner in ends:
            ends[rt] = ends[inner]
    rows = list(rows)
    pts = row_points(rows, ends)
    kind_machines = set() if typical is None else {
        r.get("lease") or "?" for r in rows if typical in r.get("device", "") and row_runtime(r)[0] is not None}
    runtimes, names, x, y, rt_idx, m_idx, w = point_arrays(pts)
    for k, rt in enumerate(runtimes):
        if len(set(x[rt_idx == k].tolist())) < 2:
            raise ConfigError("host overhead", f"runtime {rt}: needs rows with at least two layers x micro-batches")
    groups = _machine_groups(rt_idx, m_idx, len(names))
    f = np.ones(len(names))
    lines = np.zeros((len(runtimes), 2))  # (slope, intercept)
    for _ in range(100):
        for k in range(len(runtimes)):
            sel = rt_idx == k
            lines[k] = _nonnegative_line(x[sel], y[sel] / f[m_idx[sel]], w[sel])[:2]
        f = machine_scales(y, lines[rt_idx, 1] + lines[rt_idx, 0] * x, w, m_idx, len(names))
        for group in groups:  # each set of machines tied by shared runtimes: its factors' mean is 1
            f[group] /= np.exp(np.log(f[group]).mean())
    if typical is not None:
        if not kind_machines:
            raise ConfigError("--typical", f"no row's device contains {typical!r}")
        for group in groups:  # the kind's machines' mean is 1 (the lines scale by the inverse)
            mine = [j for j in group if names[j] in kind_machines]
            if mine:
                f[group] /= np.exp(np.log(f[mine]).mean())
    out: dict[str, dict[str, Any]] = {}
    for k, rt in enumerate(runtimes):
        sel = rt_idx == k
        slope, intercept, free_intercept = _nonnegative_line(x[sel], y[sel] / f[m_idx[sel]], w[sel])
        if not slope > 0:
            raise ConfigError("host overhead", f"runtime {rt}: host time does not grow with the layers ({slope:g})")
        fitted = f[m_idx[sel]] * (intercept + slope * x[sel])
        seen = sorted({names[j] for j in m_idx[sel].tolist()})
        out[rt] = {"per_layer_s": float(slope), "per_iteration_s": float(intercept),
                   "fitted_intercept_s": float(free_intercept), "overlap": OVERLAP[rt], "rows": int(sel.sum()),
                   "leases": len(seen), "lease_factors": {n: float(f[names.index(n)]) for n in seen},
                   "max_residual_s": float(np.abs(fitted - y[sel]).max())}
        if rt in ends:
            out[rt]["head_tail"] = dict(ends[rt])
    return out


def _nonnegative_line(x: Any, y: Any, w: Any) -> tuple[float, float, float]:
    """Weighted least squares ``y = intercept + slope * x`` with ``intercept >= 0``: (slope,
    intercept, the unconstrained intercept). A host cannot cost less than nothing per iteration; where
    the free fit's intercept is negative the constrained optimum lies on ``intercept = 0``, a line
    through the origin fitted again. (Zeroing the free fit's intercept and keeping its slope, as this
    module did before 2026-11-28, moved the whole line up by that intercept: the eager pipeline's
    by 7.8 ms an iteration.)"""
    import numpy as np

    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))  # polyfit squares its weights
    if intercept >= 0:
        return float(slope), float(intercept), float(intercept)
    return float((w * x * y).sum() / (w * x * x).sum()), 0.0, float(intercept)


def _machine_groups(rt_idx, m_idx, machines: int) -> list[list[int]]:
    """The machines in groups joined by a runtime measured on both (connected components). A
    group's factors are fixed only relative to each other: machines that share no runtime with
    another group (train_3d.py's rows and train_hf_parallel.py's came from different machines)
    are normalised on their own, so adding one group leaves another's lines unchanged."""
    parent = list(range(machines))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[int, int] = {}
    for rt, m in zip(rt_idx.tolist(), m_idx.tolist(), strict=True):
        if rt in first:
            parent[root(m)] = root(first[rt])
        else:
            first[rt] = m
    out: dict[int, list[int]] = {}
    for m in range(machines):
        out.setdefault(root(m), []).append(m)
    return list(out.values())


def machine_names(paths: Sequence[str]) -> dict[str, str]:
    """The machine a table without a ``lease`` column ran on, named by its file: ``<folder>/<stem>``,
    or the whole path without its suffix where two files share that name (``BE/host/measured.csv`` and
    ``BF/host/measured.csv`` are two machines, not one)."""
    short = {p: f"{Path(p).parent.name}/{Path(p).stem}" for p in paths}
    uses = Counter(short.values())
    return {p: (Path(p).with_suffix("").as_posix() if uses[n] > 1 else n) for p, n in short.items()}


def read_rows(paths: Sequence[str]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    names = machine_names(list(dict.fromkeys(paths)))
    for p in paths:
        try:
            with open(p, newline="") as fh:
                got = list(csv.DictReader(fh))
        except OSError as e:
            raise ConfigError(p, f"cannot read: {e.strerror}") from None
        missing = {"layout", "layers", "micro_batches", "min_s", "device"} - set(got[0] if got else {})
        if missing:
            raise ConfigError(p, f"missing columns: {', '.join(sorted(missing))}")
        for i, r in enumerate(got, start=2):
            if None in r.values() or None in r:  # csv.DictReader's fill for a short or long row
                raise ConfigError(f"{p}:{i}", f"has {len([v for v in r.values() if v is not None])} fields, "
                                  f"the header {len(got[0])}")
        # a table without a lease column is one machine's, named by its file
        rows += [r if r.get("lease") else {**r, "lease": names[p]} for r in got]
    return rows


def load_host_overhead(path: str | Path) -> dict[str, dict]:
    """The fitted table of a profile directory's ``host_overhead.json`` (ConfigError naming the file)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        runtimes = data["runtimes"]
        for rt, v in runtimes.items():
            if rt not in OVERLAP or v["overlap"] not in ("serial", "overlapped", "ahead"):
                raise ValueError(f"unknown runtime {rt!r} or overlap {v.get('overlap')!r}")
            for key in ("per_layer_s", "per_iteration_s"):
                if not (isinstance(v[key], (int, float)) and v[key] >= 0):
                    raise ValueError(f"{rt}.{key} must be a non-negative number")
            for key in HEAD_TAIL_PARTS if "head_tail" in v else ():
                if not (isinstance(v["head_tail"][key], (int, float)) and v["head_tail"][key] >= 0):
                    raise ValueError(f"{rt}.head_tail.{key} must be a non-negative number")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(str(p), f"not a host-overhead table: {e}") from None
    ck = p.with_name(CHECKPOINT_FILE)
    if ck.is_file():
        try:
            for rt, v in json.loads(ck.read_text())["runtimes"].items():
                c = v["checkpoint_s"]
                if rt not in runtimes:
                    raise ValueError(f"runtime {rt!r} is not in {p.name}")
                if not (isinstance(c, (int, float)) and c >= 0):
                    raise ValueError(f"{rt}.checkpoint_s must be a non-negative number")
                runtimes[rt] = {**runtimes[rt], "checkpoint_s": float(c)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(str(ck), f"not a checkpoint-overhead table: {e}") from None
    for rt, inner in WRAPPED_RUNTIMES.items():  # torch.utils.checkpoint's own work is the wrapped model's
        if rt in runtimes and "checkpoint_s" not in runtimes[rt] and "checkpoint_s" in runtimes.get(inner, {}):
            runtimes[rt] = {**runtimes[rt], "checkpoint_s": runtimes[inner]["checkpoint_s"]}
    return runtimes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fit the runtimes' host cost from tiny-shape train_hf_parallel rows")
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--head-tail", metavar="[RUNTIME=]JSONL", action="append", default=[],
                    help="a head-and-tail probe's output (validation/probe_head_host.py, the eager runtime's; "
                         "validation/probe_parallel_head_host.py, RUNTIME one of "
                         f"{', '.join(sorted(HEAD_TAIL_RUNTIMES))}): the micro-batch's host work outside its "
                         "layers; a runtime given several files takes the median of all")
    ap.add_argument("--typical", metavar="DEVICE", help="normalise to the machines whose device column contains "
                    "this (e.g. H200): the lines of that GPU kind's typical host")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.csv)
        sources: dict[str, list[str]] = {}
        for a in args.head_tail:
            rt, path = parse_head_tail_arg(a)
            sources.setdefault(rt, []).append(path)
        head_tail = {rt: read_head_tail(paths, rt) for rt, paths in sources.items()}
        table = fit_host_overhead(rows, head_tail, args.typical)
    except ConfigError as e:
        print(f"host_overhead: error: {e}", file=sys.stderr)
        return 2
    devices = sorted({r["device"] for r in rows})
    doc = {"source": [Path(p).as_posix() for p in args.csv], "devices": devices,
           "model": "host seconds per iteration = per_iteration_s + per_layer_s * layer-steps on the critical path "
                    "(layers * micro_batches without a pipeline; micro_batches * (layers + the head and tail in "
                    "layers) where the runtime has head_tail)",
           "runtimes": table}
    if sources:
        doc["head_tail_sources"] = {rt: [Path(p).as_posix() for p in paths] for rt, paths in sorted(sources.items())}
    if args.typical:
        doc["typical"] = args.typical
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for rt, v in table.items():
        spread = ", ".join(f"{k} x{f:.2f}" for k, f in v["lease_factors"].items())
        print(f"{rt:11} {v['per_layer_s'] * 1e3:7.3f} ms per layer and micro-batch, "
              f"{v['per_iteration_s'] * 1e3:7.2f} ms per iteration ({v['overlap']}, {v['rows']} rows from "
              f"{v['leases']} machines: {spread}; max residual {v['max_residual_s'] * 1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
