"""FSDP2's copy kernels, measured: what the all-gather's copy-in and copy-out and the reduce-scatter's copy-in cost.

FSDP2 (``fully_shard``) copies the rank's shards into the all-gather's flat input
(``_foreach_copy_``, on the all-gather's stream before the collective), every parameter of a unit
out of the all-gather's flat output into the unsharded parameters (``split_with_sizes_copy``) and
every unsharded gradient into the reduce-scatter's flat input (``_chunk_cat``), the last two on the
compute stream (``sim/exposed.py`` says where each runs). They are memory-bound copies, but none
runs at the rate of the gradient accumulation's ``add`` that priced the last two before:
``validation/probe_fsdp_copies.py`` timed the four on the tensors of a GPT-NeoX layer and of the
root unit (embedding and LM head), hidden 512–8192, world 2 and 4, on one GPU. At hidden 4096,
world 2, per byte read and written:

========  ==========  ==========  ==========  ==========
GPU       copy-in     copy-out    chunk_cat   accumulate
========  ==========  ==========  ==========  ==========
H200      3.71 TB/s   3.96 TB/s   3.30 TB/s   4.24 TB/s
H100      2.52 TB/s   2.82 TB/s   2.60 TB/s   2.99 TB/s
========  ==========  ==========  ==========  ==========

(``validation/fsdp_copies_h200_machineAX``, ``validation/fsdp_copies_h100_machineAY``.) A
kernel trace of the trainer (fsdp2 d4096-L6, H200) ran the same kernels in 0.40 and 0.47 ms per
layer; the probe 0.41 and 0.49.

This module turns the probe's rows into ``fsdp_copies.json`` (one curve per (copy, world): the
measured bytes and seconds, sorted) and prices a copy of any size from it: the seconds per byte
interpolated linearly in log(bytes) between the two nearest samples. Outside the measured sizes,
or for a world the probe did not run, the nearest curve's edge rate is used (a memory-bound copy's
rate flattens at large sizes: 3.91–3.97 TB/s from 2.4 GB up on the H200) and the caller is told,
so the prediction can say so. Pure Python (json): the simulation loads it without torch.

    python -m trainsim.calibration.fsdp_copies validation/fsdp_copies_h100_machineAY/fsdp_copies.jsonl \\
        --out calibration/profiles/h100-sxm-bf16/fsdp_copies.json
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from trainsim.operators.errors import ConfigError, show

FSDP_COPIES_FILE = "fsdp_copies.json"
#: the copies the simulation prices (the probe's ``accumulate`` is the reference): the all-gather's
#: copy-in (on the all-gather's stream, before the collective) and copy-out, and the reduce-scatter's
#: copy-in (``chunk_cat``)
COPIES = ("copy_in", "copy_out", "chunk_cat")
#: the copies a table must have; one without ``copy_in`` (written before 2026-11-28) leaves the
#: all-gather's copy-in uncharged, as the simulation did then
REQUIRED_COPIES = ("copy_out", "chunk_cat")


@dataclass(frozen=True)
class FSDPCopyRates:
    """Measured seconds of FSDP2's copies: ``curves[(copy, world)]`` is ``((bytes, seconds), ...)``
    in increasing bytes (bytes read plus bytes written)."""

    curves: Mapping[tuple[str, int], tuple[tuple[int, float], ...]]
    device: str = ""
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        checked = {}
        for key, points in dict(self.curves).items():
            op, world = key
            where = f"fsdp_copies.{op}.world{world}"
            if op not in COPIES:
                raise ConfigError("fsdp_copies", f"unknown copy {show(op)}; known: {', '.join(COPIES)}")
            if not isinstance(world, int) or isinstance(world, bool) or world < 2:
                raise ConfigError(where, f"world must be an integer >= 2, got {show(world)}")
            pts = tuple((int(b), float(s)) for b, s in points)
            if not pts:
                raise ConfigError(where, "no samples")
            for b, s in pts:
                if b <= 0 or not math.isfinite(s) or s <= 0:
                    raise ConfigError(where, f"bytes and seconds must be positive and finite, got ({b}, {s})")
            if any(b2 <= b1 for (b1, _), (b2, _) in zip(pts, pts[1:], strict=False)):
                raise ConfigError(where, "sizes must increase strictly")
            checked[(op, world)] = pts
        for op in REQUIRED_COPIES:
            if not any(o == op for o, _ in checked):
                raise ConfigError("fsdp_copies", f"no curve for {op}")
        object.__setattr__(self, "curves", MappingProxyType(checked))

    def has(self, op: str) -> bool:
        """Whether the table has a curve for copy ``op``."""
        return any(o == op for o, _ in self.curves)

    def seconds(self, op: str, world: int, nbytes: float) -> tuple[float, bool]:
        """(seconds of copy ``op`` moving ``nbytes`` over ``world`` ranks, whether that was measured:
        ``nbytes`` inside the sampled sizes of a sampled world). Outside, the nearest edge's rate."""
        if nbytes <= 0:
            return 0.0, True
        worlds = sorted(w for o, w in self.curves if o == op)
        w = min(worlds, key=lambda x: (abs(x - world), -x))  # the nearest world; the larger on a tie
        pts = self.curves[(op, w)]
        sizes = [b for b, _ in pts]
        per_byte = [s / b for b, s in pts]
        inside = w == world and sizes[0] <= nbytes <= sizes[-1]
        i = bisect.bisect_left(sizes, nbytes)
        if i == 0:
            return nbytes * per_byte[0], inside
        if i == len(sizes):
            return nbytes * per_byte[-1], inside
        x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
        t = (math.log(nbytes) - x0) / (x1 - x0)
        return nbytes * (per_byte[i - 1] + t * (per_byte[i] - per_byte[i - 1])), inside


def fit_rows(rows: Iterable[Mapping[str, Any]], source: str = "") -> dict[str, Any]:
    """The JSON document of the probe's rows: per (copy, world), the median seconds per size."""
    by_key: dict[tuple[str, int], dict[int, list[float]]] = {}
    devices = set()
    for n, r in enumerate(rows, 1):
        try:
            op, world, nbytes, secs = str(r["op"]), int(r["world"]), int(r["bytes"]), float(r["seconds"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{source or 'rows'}: row {n}", f"needs op, world, bytes and seconds ({e})") from None
        if op not in COPIES:
            continue
        devices.add(str(r.get("device", "")))
        by_key.setdefault((op, world), {}).setdefault(nbytes, []).append(secs)
    if len(devices) > 1:
        raise ConfigError(source or "rows",
                          f"samples of several GPUs ({', '.join(sorted(devices))}); fit one at a time")
    curves = {f"{op}/{world}": [[b, statistics.median(v)] for b, v in sorted(sizes.items())]
              for (op, world), sizes in sorted(by_key.items())}
    doc = {"model": "seconds per byte interpolated in log(bytes) between measured sizes; the edge rate outside",
           "device": next(iter(devices), ""), "source": source, "curves": curves}
    from_json(doc, source or "rows")  # refuse what the simulation could not load
    return doc


def from_json(doc: Mapping[str, Any], where: str) -> FSDPCopyRates:
    curves = doc.get("curves") if isinstance(doc, Mapping) else None
    if not isinstance(curves, Mapping):
        raise ConfigError(where, "needs a 'curves' mapping of 'copy/world' to [[bytes, seconds], ...]")
    parsed: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {}
    for key, pts in curves.items():
        op, _, w = str(key).partition("/")
        try:
            world = int(w)
            parsed[(op, world)] = tuple((int(b), float(s)) for b, s in pts)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: curves.{key}", "needs 'copy/world' and [[bytes, seconds], ...]") from None
    return FSDPCopyRates(parsed, device=str(doc.get("device", "")), source=str(doc.get("source", "")))


def load_fsdp_copies(path: str | os.PathLike) -> FSDPCopyRates:
    """A profile's ``fsdp_copies.json``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(str(p), f"cannot read FSDP copy rates ({e})") from None
    return from_json(doc, str(p))


def read_rows(paths: Sequence[str]) -> list[dict]:
    rows = []
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as e:
            raise ConfigError(path, f"cannot read ({e.strerror})") from None
        for n, line in enumerate(lines, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ConfigError(f"{path}: line {n}", "not a JSON object") from None
    return rows


def dumps(doc: Mapping[str, Any]) -> str:
    """The document as JSON with one curve per line."""
    head = {k: v for k, v in doc.items() if k != "curves"}
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc["curves"].items()]
    body = json.dumps(head, indent=1)[:-2]
    return body + ',\n "curves": {\n' + ",\n".join(lines) + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="validation/probe_fsdp_copies.py output")
    ap.add_argument("--out", required=True, metavar="JSON")
    args = ap.parse_args(argv)
    try:
        doc = fit_rows(read_rows(args.jsonl), source=", ".join(args.jsonl))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.out).write_text(dumps(doc))
    for key, pts in doc["curves"].items():
        lo, hi = pts[0], pts[-1]
        print(f"{key:14s} {len(pts):2d} sizes, {lo[0] / lo[1] / 1e12:.2f} TB/s at {lo[0] / 2**20:.0f} MiB, "
              f"{hi[0] / hi[1] / 1e12:.2f} TB/s at {hi[0] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
