"""The hosts of one GPU kind against another kind's host lines: how fast each lent machine's host is.

A profile's host lines (calibration/host_overhead.py) are one typical host; the machines they were
fitted on ran ``lease_factors`` times them, and the host band of a prediction (``scenarios.compose``
``HostBand``) is the iteration on the fastest and the slowest of those. ``h200-sxm-bf16`` borrows the
H100 hosts' lines (``host_overhead_from`` in its meta.json): fitting lines of its own to its hosts made
the single-GPU tables worse three times (docs/multi_gpu.md). Its band, though, should say how the H200
machines' hosts spread, not the H100 machines': this module measures each H200 machine's factor against
the borrowed lines, with the lines held fixed,

    factor(machine) = sum(w * measured * line) / sum(w * line^2)   over that machine's tiny rows,

the least-squares scale of :func:`calibration.host_overhead.fit_host_overhead`'s own factor step, each
runtime weighing the same on a machine (``w`` = 1 / its rows there). The profile then carries those
factors (``host_factors.json``) in place of the lines' own machines; the lines, and so every
prediction, stay the same.

    python -m trainsim.calibration.host_factors --against calibration/profiles/h100-sxm-bf16/host_overhead.json \\
        --out calibration/profiles/h200-sxm-bf16/host_factors.json MACHINE=CSV ...

``MACHINE=CSV``: a table of ``validation/train_hf_parallel.py`` and the machine it ran on; only its rows at
the tiny shapes (``hf_parallel_shapes_host.csv``, named ``host-*``) count. A machine named twice takes the
rows of both.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from trainsim.operators.errors import ConfigError

HOST_FACTORS_FILE = "host_factors.json"
#: The tiny shapes' names (validation/hf_parallel_shapes_host.csv): a table's other rows carry GPU work
TINY_PREFIX = "host-"


def machine_factors(rows: Iterable[dict[str, str]], table: Mapping[str, dict]) -> dict[str, float]:
    """Each machine's (the rows' ``lease``) host factor against ``table``'s fixed lines (module doc).
    Rows of a runtime the table has no line for are left out; a machine left with no row is an error."""
    from trainsim.calibration.host_overhead import machine_scales, point_arrays, row_points

    ends = {rt: e["head_tail"] for rt, e in table.items() if "head_tail" in e}
    pts = row_points(rows, ends)
    lined = [p for p in pts if p[0] in table]
    empty = sorted({p[3] for p in pts} - {p[3] for p in lined})
    if empty:
        raise ConfigError("host factors", f"machine {empty[0]}: no row of a runtime the lines have")
    runtimes, names, x, y, rt_idx, m_idx, w = point_arrays(lined)
    slope = np.array([table[rt]["per_layer_s"] for rt in runtimes])
    intercept = np.array([table[rt]["per_iteration_s"] for rt in runtimes])
    f = machine_scales(y, intercept[rt_idx] + slope[rt_idx] * x, w, m_idx, len(names))
    return {m: float(v) for m, v in zip(names, f, strict=True)}


def load_host_factors(path: str | Path) -> dict[str, float]:
    """``host_factors.json``'s machines (ConfigError naming the file)."""
    p = Path(path)
    try:
        machines = json.loads(p.read_text())["machines"]
        out = {str(m): float(f) for m, f in machines.items()}
        if len(out) < 2 or not all(f > 0 for f in out.values()):
            raise ValueError("needs two or more machines, each with a positive factor")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(str(p), f"not a host-factors table: {e}") from None
    return out


def with_host_factors(host_overhead: Mapping[str, dict], factors: Mapping[str, float]) -> dict[str, dict]:
    """The host table with every runtime's ``lease_factors`` replaced by ``factors``: the band and the
    notes then tell the spread of these machines' hosts; the lines are unchanged."""
    return {rt: {**e, "lease_factors": dict(factors), "leases": len(factors)} for rt, e in host_overhead.items()}


def _machine_arg(arg: str) -> tuple[str, str]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise ConfigError(arg, "expected MACHINE=CSV")
    return name, path


def main(argv: Sequence[str] | None = None) -> int:
    from trainsim.calibration.host_overhead import load_host_overhead, read_rows

    ap = argparse.ArgumentParser(description="each machine's host factor against a profile's fixed host lines")
    ap.add_argument("tables", nargs="+", metavar="MACHINE=CSV")
    ap.add_argument("--against", required=True, metavar="HOST_OVERHEAD_JSON")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        table = load_host_overhead(args.against)
        rows: list[dict[str, str]] = []
        pairs = [_machine_arg(a) for a in args.tables]
        for name, path in pairs:
            rows += [{**r, "lease": name} for r in read_rows([path]) if r.get("name", "").startswith(TINY_PREFIX)]
        factors = machine_factors(rows, table)
    except ConfigError as e:
        print(f"host_factors: error: {e}", file=sys.stderr)
        return 2
    doc = {"against": Path(args.against).as_posix(), "machines": factors,
           "sources": {name: [Path(p).as_posix() for n, p in pairs if n == name] for name in factors},
           "model": "each machine's tiny rows = factor * the lines of 'against' (least squares, the lines fixed, "
                    "each runtime weighing the same on a machine)"}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for m, f in factors.items():
        print(f"{m:6} x{f:.3f}")
    lo, hi = min(factors.values()), max(factors.values())
    print(f"{len(factors)} machines: x{lo:.2f} to x{hi:.2f} of the lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
