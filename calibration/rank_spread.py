"""How far the slowest of the ranks that meet in every layer lags the others, on the host.

Under DTensor tensor parallelism the ranks of a TP group meet at collectives inside every layer (the
row-parallel all-reduces), and once per micro-batch each rank's host waits for its own GPU (Hugging
Face's causal-mask construction). Where the host sets the pace, a micro-batch then takes as long as the
slowest rank's host issues it, not the typical rank's. (FSDP2's shards also meet, at all-gathers issued
a unit ahead; with the lag over them the measured rows got worse, so it is not applied there:
:data:`trainsim.operators.stages.RENDEZVOUS_RUNTIMES`.)

``validation/probe_tp_host_pace.py`` marks, on every rank, when the host starts each micro-batch's first
layer and when it is done with the forward (:func:`micro_batch_host`). At the tiny host shapes
(``host-*`` in ``validation/hf_parallel_shapes_host.csv``), where the host never waits for the GPU
inside a forward, that is the host's own issue time. Per micro-batch, the slowest rank's over the ranks'
mean is the lag; its median over a run's micro-batches is :func:`read_rank_spread`'s point for that many
ranks. Measured on H200 hosts (2026-11-28), per tiny shape: tp2 1.05-1.10 (machine BB), 1.09-1.16 (BN)
and 1.02-1.13 (BR), tp4 1.17-1.27 (BI); pooled, 1.088 for two ranks and 1.217 for four.

For micro-batch host times spread normally with coefficient of variation ``sigma`` across ranks, the
lag of ``n`` ranks is ``1 + sigma * E[max of n standard normals]``; :func:`fit_rank_sigma` fits ``sigma``
to the measured points by least squares, and the simulation uses it for numbers of ranks not measured
(:func:`trainsim.operators.stages.slowest_rank_factor`).

The lag is the hosts' on which the probe ran: a profile keeps it in ``rank_lag.json`` (:data:`RANK_LAG_FILE`)
beside its host table, and it scales the host lines of :data:`trainsim.operators.stages.RENDEZVOUS_RUNTIMES`
(``Profile.host_overhead``'s entries gain ``rank_lag`` and ``rank_sigma``). The H200 profile's comes from
the lent H200 hosts; the H100 profile has none (no H100 host was probed rank by rank, and its hosts' tiny
tp4 rows ran no slower than their tp2 rows per layer-step: docs/multi_gpu.md).

    python -m trainsim.calibration.rank_spread validation/tp_host_pace_h200_2gpu_machineBB/tp_host_pace.jsonl \\
        validation/rank_lag_h200_2gpu_machineBN/tp_host_pace.jsonl \\
        validation/rank_lag_layouts_h200_2gpu_machineBR/tp_host_pace.jsonl \\
        validation/tp_host_pace_h200_4gpu_machineBI/tp_host_pace.jsonl \\
        --out calibration/profiles/h200-sxm-bf16/rank_lag.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainsim.operators.errors import ConfigError
from trainsim.operators.stages import RENDEZVOUS_RUNTIMES, expected_max_normal

#: a profile's measured rank lag (beside its host table, calibration/host_overhead.py)
RANK_LAG_FILE = "rank_lag.json"

#: the probe's shapes whose forward is all host time (validation/hf_parallel_shapes_host.csv)
TINY_PREFIX = "host-"
#: the layouts whose lag this measures: tensor parallelism alone (a file may also hold other layouts'
#: lines: dp2's ranks do not meet inside a micro-batch, fsdp2's lag is not the one applied)
TP_LAYOUT = re.compile(r"tp\d+")


def micro_batch_host(marks: Sequence[Sequence]) -> dict[int, float]:
    """Per micro-batch: seconds from its first layer's start (``L``, layer 0) to the forward's end (``E``),
    the host's own issue time of the layers and the tail. What comes before the first layer waits for the
    GPU (the causal mask's synchronisation), and at shapes where the host runs ahead of the GPU so may
    the rest: only at the tiny shapes is all of it host time."""
    first: dict[int, int] = {}
    end: dict[int, int] = {}
    for kind, mb, layer, t in marks:
        if kind == "L" and layer == 0:
            first[int(mb)] = int(t)
        elif kind == "E":
            end[int(mb)] = int(t)
    return {mb: (end[mb] - t) * 1e-9 for mb, t in first.items() if mb in end}


def robust_cv(xs: Sequence[float]) -> float:
    """Interquartile range / 1.349 over the median (a normal's coefficient of variation, unmoved by the
    odd stalled micro-batch); NaN for fewer than four values."""
    if len(xs) < 4:
        return float("nan")
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / 1.349 / statistics.median(xs)


def micro_batches(lines: Sequence[Mapping]) -> dict[tuple[str, str], dict[tuple[int, int], dict[int, float]]]:
    """Per (layout, shape): per (iteration, micro-batch): each rank's :func:`micro_batch_host` seconds."""
    out: dict[tuple[str, str], dict[tuple[int, int], dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in lines:
        for mb, sec in micro_batch_host(r["marks"]).items():
            out[str(r["layout"]), str(r["name"])][int(r["iter"]), mb][int(r["rank"])] = sec
    return out


def lag(by_rank: Mapping[int, float]) -> float:
    """The slowest rank's seconds over the ranks' mean (1 with one rank)."""
    return max(by_rank.values()) / statistics.fmean(by_rank.values())


def read_rank_spread(paths: Sequence[str]) -> dict[int, float]:
    """Per number of ranks: the median over every file's tiny-shape micro-batches of :func:`lag` under
    tensor parallelism alone (:data:`TP_LAYOUT`; each micro-batch counts once). ConfigError naming a file
    that is not the probe's output or has no tiny shape of a TP layout on more than one rank."""
    lags: dict[int, list[float]] = defaultdict(list)
    for path in paths:
        try:
            lines = [json.loads(s) for s in Path(path).read_text().splitlines() if s.strip()]
            found = 0
            for (layout, name), mbs in micro_batches(lines).items():
                if not (name.startswith(TINY_PREFIX) and TP_LAYOUT.fullmatch(layout)):
                    continue
                for by_rank in mbs.values():
                    if len(by_rank) > 1:
                        lags[len(by_rank)].append(lag(by_rank))
                        found += 1
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(path, f"not validation/probe_tp_host_pace.py output: {e}") from None
        if not found:
            raise ConfigError(path, f"no {TINY_PREFIX}* shape of a tpN layout run on more than one rank")
    return {n: float(statistics.median(v)) for n, v in sorted(lags.items())}


def fit_rank_sigma(spread: Mapping[int, float]) -> float:
    """The ``sigma`` whose ``1 + sigma * E[max of n normals]`` is nearest (least squares) the measured lag
    of each ``n`` in ``spread``; ConfigError where the points give none above 0."""
    e = {n: expected_max_normal(n) for n in spread if n > 1}
    den = sum(v * v for v in e.values())
    sigma = sum(e[n] * (spread[n] - 1.0) for n in e) / den if den else 0.0
    if not sigma > 0:
        raise ConfigError("rank lag", f"the ranks' lags {dict(spread)} give no spread above 0")
    return sigma


def load_rank_lag(path: str | Path) -> tuple[dict[int, float], float]:
    """(lag per number of ranks, sigma) of a profile's :data:`RANK_LAG_FILE`; ConfigError naming the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
        lag = {int(n): v for n, v in doc["lag"].items()}
        sigma = doc["sigma"]
        for n, v in lag.items():
            if not (n > 1 and isinstance(v, (int, float)) and 1 <= v < 3):
                raise ValueError(f"lag of {n} ranks: {v!r} is not a number from 1 to 3 (ranks > 1)")
        if not (isinstance(sigma, (int, float)) and 0 <= sigma < 1):
            raise ValueError(f"sigma: {sigma!r} is not a number from 0 to 1")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(str(p), f"not a rank-lag table: {e}") from None
    return {n: float(v) for n, v in sorted(lag.items())}, float(sigma)


def with_rank_lag(host_overhead: Mapping[str, dict], lag: Mapping[int, float], sigma: float) -> dict[str, dict]:
    """A host table whose :data:`RENDEZVOUS_RUNTIMES` entries carry the measured ``rank_lag`` and
    ``rank_sigma`` (what ``sim/host_time.py`` scales their host lines by); the others unchanged."""
    return {rt: ({**e, "rank_lag": dict(lag), "rank_sigma": sigma} if rt in RENDEZVOUS_RUNTIMES else e)
            for rt, e in host_overhead.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the slowest rank's host lag per number of ranks, from "
                                             "validation/probe_tp_host_pace.py runs at the tiny shapes")
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        lag = read_rank_spread(args.jsonl)
        sigma = fit_rank_sigma(lag)
    except ConfigError as e:
        print(f"rank_spread: error: {e}", file=sys.stderr)
        return 2
    doc = {"lag": {str(n): v for n, v in lag.items()}, "sigma": sigma, "runtimes": sorted(RENDEZVOUS_RUNTIMES),
           "sources": [Path(p).as_posix() for p in args.jsonl],
           "model": "a micro-batch of a rendezvous runtime takes lag(ranks) times a typical rank's host time; "
                    "ranks not measured: 1 + sigma * E[max of ranks standard normals]"}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for n, v in lag.items():
        normal = 1 + sigma * expected_max_normal(n)
        print(f"{n} ranks: the slowest host x{v:.3f} the mean (normal spread: x{normal:.3f})")
    print(f"sigma {sigma:.4f}: 8 ranks x{1 + sigma * expected_max_normal(8):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
