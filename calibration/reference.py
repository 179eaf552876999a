"""Read the reference implementation's published samples into our schema.

The reference (DebarghaG/estimate-train-time) ships, per cluster, ``operator/`` CSVs
with raw shape columns (a subset of mp, b, h, l, dim) and ``F_dur(us)``, ``B_dur(us)``,
optimizer CSVs with ``mp, dim, encoders, dur(us)``, and ``nccl/`` CSVs with
``shape, nodes, GPUsPerNode, dur(us)``. Each row becomes an :class:`Op` (or
:class:`Collective`) so that the regressors are fitted on *our* Table I features.
The data are read from a directory the user names; they are never copied into the
repository.
"""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from collections import defaultdict
from pathlib import Path

from trainsim.calibration.samples import CollectiveSample, ComputeSample, DataQuirkWarning
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind, bytes_moved
from trainsim.operators.partition import padded_vocab

ENV_VAR = "TRAINSIM_REFERENCE_DATA"
CLUSTERS = ("Perlmutter", "Vista")
GPT_NEOX_VOCAB = 50257  # the reference pads this vocabulary (Eq. 1-2) for every sample

#: Reference operator file name -> our operator kind.
OPERATOR_FILES: dict[str, OpKind] = {
    "embedding": OpKind.EMBEDDING,
    "layernorm": OpKind.LAYERNORM,
    "RMSlayernorm": OpKind.RMSNORM,
    "res_add": OpKind.RES_ADD,
    "linear1": OpKind.LINEAR1,
    "linear2": OpKind.LINEAR2,
    "linear3": OpKind.LINEAR3,
    "linear4": OpKind.LINEAR4,
    "linear_final": OpKind.LINEAR_FINAL,
    "gelu": OpKind.GELU,
    "RoPE": OpKind.ROPE,
    "baddbmm": OpKind.BADDBMM,
    "bmm": OpKind.BMM,
    "fillmask": OpKind.FILLMASK,
    "flash_atten": OpKind.FLASH_ATTN,
    "softmax": OpKind.SOFTMAX,
    "ScaledUpperTriangMaskedSoftmax": OpKind.FUSED_SOFTMAX,
    "parallel_cross_entropy_128": OpKind.CROSS_ENTROPY,
    "firstStage_optimizer": OpKind.OPTIMIZER_FIRST,
    "middleStage_optimizer": OpKind.OPTIMIZER_MIDDLE,
    "lastStage_optimizer": OpKind.OPTIMIZER_LAST,
}
#: Files we read past on purpose: ``optimizer`` has another schema (num_layers,
#: hidden_size, param_tensors, params, dur) and no stage role.
SKIPPED_OPERATOR_FILES = ("optimizer",)

#: allreduce (MP-sized) and allreduce_large (DP-sized) are the same NCCL call.
NCCL_FILES: dict[str, CollKind] = {
    "allreduce": CollKind.ALL_REDUCE,
    "allreduce_large": CollKind.ALL_REDUCE,
    "allgather_large": CollKind.ALL_GATHER,
    "p2p": CollKind.P2P,
}

_OP_RE = re.compile(r"^(?P<gpu>[^_]+)_(?P<op>.+)_fp16\.csv$")
_NCCL_RE = re.compile(r"^(?P<gpu>[^_]+)_(?P<coll>.+)_fp16_(?P<nodes>\d+)_(?P<gpn>\d+)\.csv$")


def resolve_reference_dir(cli_value: str | None) -> Path:
    """The folder holding ``Perlmutter/`` and ``Vista/``: option value, else the env variable.

    Also accepts the public repository's ``src/estimate_train_time/data/regressors``
    folder (same layout) or the repository root that contains it.
    """
    value = cli_value if cli_value else os.environ.get(ENV_VAR)
    if not value:
        raise ConfigError("--reference-data",
                          f"no reference data folder given; set --reference-data DIR or {ENV_VAR}")
    root = Path(value).expanduser()
    if not root.is_dir():
        raise ConfigError("--reference-data", f"reference data folder {root} does not exist")
    for cand in (root, root / "src" / "estimate_train_time" / "data" / "regressors",
                 root / "estimate-train-time"):
        if any((cand / c / "operator").is_dir() for c in CLUSTERS):
            return cand
    raise ConfigError("--reference-data",
                      f"{root} holds no Perlmutter/operator or Vista/operator folder (expected the "
                      f"reference's data/regressors layout)")


def _cluster_dir(root: Path, cluster: str) -> Path:
    for c in CLUSTERS:
        if c.lower() == cluster.lower():
            d = Path(root) / c
            if not (d / "operator").is_dir():
                raise ConfigError("--reference-data", f"{d / 'operator'} does not exist")
            return d
    raise ConfigError("profile", f"unknown reference cluster {cluster!r}; known: {', '.join(CLUSTERS)}")


def reference_files(root: str | os.PathLike, cluster: str) -> tuple[list[Path], list[Path]]:
    """The operator and NCCL files that :func:`load_reference` reads (sorted)."""
    d = _cluster_dir(Path(root), cluster)
    ops, nccl = [], []
    for p in sorted((d / "operator").glob("*.csv")):
        m = _OP_RE.match(p.name)
        if m and m["op"] in OPERATOR_FILES:
            ops.append(p)
    for p in sorted((d / "nccl").glob("*.csv")) if (d / "nccl").is_dir() else []:
        m = _NCCL_RE.match(p.name)  # files without _<nodes>_<gpn> are unions of the others: skipped
        if m and m["coll"] in NCCL_FILES:
            nccl.append(p)
    if not ops:
        raise ConfigError("--reference-data", f"no operator CSVs in {d / 'operator'}")
    return ops, nccl


def _read_table(path: Path) -> tuple[list[str], list[tuple[int, list[float]]]]:
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = [c.strip() for c in next(reader)]
        rows = []
        for cells in reader:
            if not cells:
                continue
            try:
                vals = [float(c) for c in cells]
            except ValueError:
                raise ConfigError(f"{path}:{reader.line_num}", f"non-numeric cell in {cells}") from None
            if len(vals) != len(header) or not all(math.isfinite(v) for v in vals):
                raise ConfigError(f"{path}:{reader.line_num}", f"malformed row {cells}")
            rows.append((reader.line_num, vals))
    return header, rows


def _op_from_row(kind: OpKind, cols: dict[str, float]) -> Op:
    mp = int(cols.get("mp", 1))
    if kind.is_optimizer:
        return Op(kind, d=int(cols["dim"]), mp=mp, layers=int(cols["encoders"]))
    return Op(kind, b=int(cols.get("b", 1)), l=int(cols.get("l", 1)), d=int(cols.get("dim", 1)),
              h=int(cols.get("h", 1)), mp=mp, v=padded_vocab(GPT_NEOX_VOCAB, mp))


def load_operator_file(path: Path, kind: OpKind) -> list[ComputeSample]:
    header, rows = _read_table(path)
    out = []
    for line, vals in rows:
        cols = dict(zip(header, vals, strict=True))
        op = _op_from_row(kind, cols)
        if kind.is_optimizer:
            out.append(ComputeSample(op, Direction.UPDATE, cols["dur(us)"]))
        else:
            out.append(ComputeSample(op, Direction.FWD, cols["F_dur(us)"]))
            out.append(ComputeSample(op, Direction.BWD, cols["B_dur(us)"]))
        if any(s.duration_us <= 0 for s in out[-2:]):
            raise ConfigError(f"{path}:{line}", "non-positive duration")
    return out


def load_nccl_file(path: Path) -> list[CollectiveSample]:
    m = _NCCL_RE.match(path.name)
    assert m is not None
    kind, nodes, gpn = NCCL_FILES[m["coll"]], int(m["nodes"]), int(m["gpn"])
    header, rows = _read_table(path)
    out = []
    for line, vals in rows:
        cols = dict(zip(header, vals, strict=True))
        if (int(cols["nodes"]), int(cols["GPUsPerNode"])) != (nodes, gpn):
            raise ConfigError(f"{path}:{line}", f"row says {cols['nodes']:g}x{cols['GPUsPerNode']:g} GPUs, "
                                                f"file name says {nodes}x{gpn}")
        if cols["dur(us)"] <= 0:
            raise ConfigError(f"{path}:{line}", "non-positive duration")
        out.append(CollectiveSample(Collective(kind, int(cols["shape"]), nodes, gpn), cols["dur(us)"]))
    return out


def load_reference(root: str | os.PathLike, cluster: str) -> tuple[list[ComputeSample], list[CollectiveSample]]:
    """All operator and collective samples of one reference cluster, in our schema."""
    op_files, nccl_files = reference_files(root, cluster)
    compute: list[ComputeSample] = []
    for p in op_files:
        m = _OP_RE.match(p.name)
        assert m is not None
        compute += load_operator_file(p, OPERATOR_FILES[m["op"]])
    colls: list[CollectiveSample] = []
    for p in nccl_files:
        colls += load_nccl_file(p)
    return compute, colls


# ----------------------------------------------------------------------------- quirks


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def find_quirks(compute: list[ComputeSample], colls: list[CollectiveSample], source: str = "",
                outlier_factor: float = 10.0, max_bus_bandwidth: float = 1e12) -> list[str]:
    """Describe samples that look wrong, without dropping any (the reference fits them too).

    Checks, per operator/direction or collective/group:
    * backward faster than forward in most rows (a kernel's backward does at least its work);
    * time per unit of work (bytes for kernels and optimizers, entries for collectives)
      more than ``outlier_factor`` away from the group's median;
    * collectives whose implied bus bandwidth exceeds ``max_bus_bandwidth`` (1 TB/s).
    """
    notes: list[str] = []
    prefix = f"{source}: " if source else ""
    fwd: dict[Op, float] = {}
    bwd: dict[Op, float] = {}
    groups: dict[tuple, list[float]] = defaultdict(list)
    for s in compute:
        if s.direction is Direction.FWD:
            fwd[s.op] = s.duration_us
        elif s.direction is Direction.BWD:
            bwd[s.op] = s.duration_us
        work = bytes_moved(s.op, s.direction)
        if work > 0:
            groups[(s.op.kind.value, s.direction.value)].append(s.duration_us / work)
    by_kind: dict[OpKind, list[bool]] = defaultdict(list)
    for op, f in fwd.items():
        # res_add's backward is a copy and cross-entropy's backward is elementwise: both
        # legitimately at most the forward.
        if op in bwd and op.kind not in (OpKind.RES_ADD, OpKind.CROSS_ENTROPY):
            by_kind[op.kind].append(bwd[op] < f)
    for kind, flags in by_kind.items():
        if flags and sum(flags) > len(flags) / 2:
            notes.append(f"{prefix}{kind.value}: backward shorter than forward in {sum(flags)} of {len(flags)} "
                         f"shapes (kept as measured)")
    fast: dict[tuple, int] = defaultdict(int)
    calls: dict[tuple, list[float]] = defaultdict(list)
    for c in colls:
        calls[(c.coll.kind.value, c.coll.nodes, c.coll.gpus_per_node, c.coll.entries)].append(c.duration_us)
    few: set[tuple] = {k[:3] for k, v in calls.items() if len(v) < 3}  # groups with a size of < 3 calls
    size_median = {k: _median(v) for k, v in calls.items() if k[:3] not in few}
    for c in colls:
        if bus_bandwidth(c.coll, c.duration_us) > max_bus_bandwidth:
            fast[(c.coll.kind.value, c.coll.nodes, c.coll.gpus_per_node)] += 1
        # Per-call tables (collectives_bench: 20 calls per size over 1 KiB - 4 GiB) are checked
        # call against its size's median: time per entry spans 1e4x between latency- and
        # bandwidth-bound sizes, so a group-wide ratio would flag half the calls. Tables with a
        # row or two per size (the reference's) keep the group-wide check.
        k = (c.coll.kind.value, c.coll.nodes, c.coll.gpus_per_node, c.coll.entries)
        ratio = c.duration_us / size_median[k] if k in size_median else c.duration_us / c.coll.entries
        groups[(c.coll.kind.value, f"{c.coll.nodes}x{c.coll.gpus_per_node}")].append(ratio)
    for (name, sub), ratios in groups.items():
        med = _median(ratios)
        bad = [r for r in ratios if r > outlier_factor * med or r < med / outlier_factor]
        if bad:
            lo, hi = min(bad) / med, max(bad) / med
            notes.append(f"{prefix}{name} ({sub}): {len(bad)} of {len(ratios)} samples are {lo:.2g}x-{hi:.2g}x "
                         f"the median time per unit of work (kept as measured)")
    for (name, nodes, gpn), n in fast.items():
        total = len(groups[(name, f"{nodes}x{gpn}")])
        notes.append(f"{prefix}{name} ({nodes}x{gpn}): {n} of {total} samples imply a bus bandwidth above "
                     f"{max_bus_bandwidth / 1e12:g} TB/s, faster than any link (kept as measured)")
    return notes


def bus_bandwidth(coll: Collective, duration_us: float) -> float:
    """NCCL's "bus bandwidth" (bytes/s) of a ring collective: comparable across group sizes."""
    n = coll.ranks
    if coll.kind is CollKind.ALL_REDUCE:
        factor = 2.0 * (n - 1) / n
    elif coll.kind is CollKind.ALL_GATHER:
        factor = float(n - 1)  # entries is the per-rank shard
    elif coll.kind is CollKind.REDUCE_SCATTER:
        factor = (n - 1) / n
    else:
        factor = 1.0
    return factor * coll.bytes / (duration_us * 1e-6)


def warn_quirks(notes: list[str]) -> None:
    for n in notes:
        warnings.warn(DataQuirkWarning(n), stacklevel=3)
