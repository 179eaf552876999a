"""The power cap's onset inside train_3d.py's own iterations, kernel by kernel (validation/device/train3d_onset.sh).

Each line of the timeline file (``train_3d.py --kernels K --timeline T --profile-iters N --idle-s 2``) holds N
iterations run back to back after 2 s idle, every kernel with its launch, start and duration. A kernel of
the first iteration is matched with the same kernel of the last iteration (the same name, the same
occurrence in its iteration): their ratio, by when the first one ran (milliseconds after the first kernel
began), is how much slower the loaded GPU runs it than the cool one. Per shape:

* ``ratio_by_window``: the last iteration's over the first's durations, GEMM kernels and the others apart,
  summed over the first iteration's kernels that began in each window (0-20 ms, 20-50, ...);
* ``busy_ms`` per iteration (the kernels' summed durations) and ``wall_ms`` (the iteration's host span);
* ``cool_gemm`` and ``cool_other``: the ratios in the first window (the cap has not set in before ~30 ms
  of full load, docs/efficiency.md), and ``cool_busy_ms``: the last iteration's busy time with its GEMM and
  other kernels divided by them: the iteration as the cool GPU would run it.

    python validation/train3d_onset.py timeline.jsonl[.gz] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_hf_parallel import kernel_category  # noqa: E402

#: the windows of the first iteration, in ms after its first kernel began
WINDOWS_MS = (0.0, 20.0, 50.0, 100.0, 200.0, float("inf"))


def records(path: str) -> Iterator[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def by_iteration(rec: dict) -> list[list[list]]:
    """The record's kernels split by the iteration whose host span holds each one's launch (its start when
    the trace has no launch), in start order."""
    spans = rec["iterations"]
    out: list[list[list]] = [[] for _ in spans]
    for k in rec["kernels"]:
        at = k[0] if k[0] is not None else k[1]
        for i, (a, b) in enumerate(spans):
            if a <= at <= b:
                out[i].append(k)
                break
    return out


def occurrences(kernels: list[list]) -> dict[tuple[str, int], list]:
    """Each kernel keyed by (name, its occurrence of that name in the iteration)."""
    seen: dict[str, int] = {}
    out = {}
    for k in kernels:
        n = seen.get(k[3], 0)
        seen[k[3]] = n + 1
        out[(k[3], n)] = k
    return out


def analyse(rec: dict) -> dict:
    iters = by_iteration(rec)
    if len(iters) < 2 or not iters[0] or not iters[-1]:
        raise ValueError("need two or more profiled iterations with kernels")
    last = occurrences(iters[-1])
    t0 = iters[0][0][1]
    sums = {(cat, w): [0.0, 0.0] for cat in ("gemm", "other") for w in range(len(WINDOWS_MS) - 1)}
    for key, k in occurrences(iters[0]).items():  # in start order
        twin = last.get(key)
        if twin is None or k[2] <= 0:
            continue
        cat = "gemm" if kernel_category(k[3]) == "gemm" else "other"
        w = next(i for i in range(len(WINDOWS_MS) - 1) if (k[1] - t0) * 1e-3 < WINDOWS_MS[i + 1])
        sums[(cat, w)][0] += k[2]
        sums[(cat, w)][1] += twin[2]
    ratio = {f"{cat}:{WINDOWS_MS[w]:g}-{WINDOWS_MS[w + 1]:g}": (b / a if a else None)
             for (cat, w), (a, b) in sums.items()}
    busy = [sum(k[2] for k in it) * 1e-3 for it in iters]
    gemm_last = sum(k[2] for k in iters[-1] if kernel_category(k[3]) == "gemm") * 1e-3
    cool = {cat: (sums[(cat, 0)][1] / sums[(cat, 0)][0] if sums[(cat, 0)][0] else None) for cat in ("gemm", "other")}
    cool_busy = None
    if cool["gemm"] and cool["other"]:
        cool_busy = gemm_last / cool["gemm"] + (busy[-1] - gemm_last) / cool["other"]
    return {"hidden": rec.get("hidden"), "layers": rec.get("layers"), "micro_batch": rec.get("micro_batch"),
            "micro_batches": rec.get("micro_batches"), "recompute": rec.get("recompute"),
            "iterations": len(iters), "busy_ms": busy, "wall_ms": [(b - a) * 1e-3 for a, b in rec["iterations"]],
            "gemm_last_ms": gemm_last, "ratio_by_window": ratio, "cool_gemm": cool["gemm"],
            "cool_other": cool["other"], "cool_busy_ms": cool_busy}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("timeline")
    p.add_argument("--json", action="store_true", help="one JSON line per shape instead of the table")
    args = p.parse_args(argv)
    try:
        rows = [analyse(r) for r in records(args.timeline)]
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"error: {args.timeline}: {e}", file=sys.stderr)
        return 2
    for a in rows:
        if args.json:
            print(json.dumps(a))
            continue
        name = f"d{a['hidden']}-L{a['layers']}-b{a['micro_batch']}-m{a['micro_batches']}" + (
            ", recompute" if a["recompute"] == "full" else "")
        print(f"{name}: {a['iterations']} iterations, busy " + " ".join(f"{b:.1f}" for b in a["busy_ms"])
              + " ms; wall " + " ".join(f"{b:.1f}" for b in a["wall_ms"]) + " ms")
        for cat in ("gemm", "other"):
            cells = [f"{k.split(':')[1]} {'-' if v is None else f'x{v:.3f}'}"
                     for k, v in a["ratio_by_window"].items() if k.startswith(cat)]
            print(f"   last / first, {cat:5s}: " + ", ".join(cells))
        if a["cool_busy_ms"] is not None:
            last = a["busy_ms"][-1]
            print(f"   cool busy {a['cool_busy_ms']:.1f} ms (last {last:.1f}: x{last / a['cool_busy_ms']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
