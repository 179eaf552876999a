"""How fast the power cap sets in: the time course of a GPU's speed from idle to minutes of load.

The operator samples are bursts (tens of ms after an idle GPU); the power probe
(calibration/power_bench.py) compares them with the second half of 10-15 s of load; the validation
trainers report the fastest of 8 iterations after 3 warm-up, 1-5 s into a configuration's load. What
the GPU does between those points, and after them, is what this probe measures on one GPU:

1. ``idle``: ``--idle-s`` seconds, NVML only (the starting temperature);
2. ``gemm``: the bf16 8192-cube GEMM back to back for ``--gemm-s`` seconds, timed per batch of about
   50 ms with CUDA events (seconds per GEMM, and the batch's end since the phase began);
3. ``cool``: ``--cool-s`` seconds idle;
4. per configuration of ``--configs`` (names in validation/configs.csv): ``train:<name>``, the
   single-GPU HF GPT-NeoX iteration of validation/train_gptneox.py (the same model, loss and fused
   AdamW) back to back for ``--train-s`` seconds, each iteration timed to its synchronisation;
   then ``cool`` again.

NVML (SM clock, power, temperature) is read from another thread every 0.25 s. JSON lines in
``--out``: ``{"kind": "step", "phase", "t", "dt"}`` and ``{"kind": "nvml", "phase", "t", ...}``; a
table per phase last (each time window's mean over the phase's first 0.5 s).

    PYTHONPATH=. python validation/probe_throttle_onset.py --out out/onset.jsonl [--configs c09,c03]

``--profile-pairs c03,c09``: per configuration, one profiled iteration from a cool GPU (after
``--gap-s`` idle) and one after ``--sustain-s`` of back-to-back load: the kernels' busy time, their
seconds by category and the GPU's idle gaps (validation/train_hf_parallel.py's ``summarize_profile``),
``{"kind": "profile", "phase": "cool"|"loaded", "config", ...}`` lines; a table of both last.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

WINDOWS = ((0.0, 0.2), (0.2, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0), (8.0, 16.0), (16.0, 32.0),
           (32.0, 64.0), (64.0, 128.0), (128.0, 256.0))


class Sampler:
    """NVML every ``period`` seconds from a daemon thread, tagged with the current phase and its clock."""

    def __init__(self, sink: Any, period: float = 0.25) -> None:
        self.sink, self.period = sink, period
        self.phase, self.t0 = "start", time.perf_counter()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def enter(self, phase: str) -> None:
        self.phase, self.t0 = phase, time.perf_counter()

    def _run(self) -> None:
        from trainsim.calibration.power_bench import smi  # nvidia-smi's clock, power and temperature

        while not self.stop:
            q = smi(0)
            if q:
                self.sink({"kind": "nvml", "phase": self.phase, "t": time.perf_counter() - self.t0,
                           **{k: q[k] for k in ("sm_mhz", "power_w", "temp_c")}})
            time.sleep(self.period)


def gemm_phase(torch: Any, seconds: float, emit: Any) -> None:
    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    batch = 36  # about 50 ms of a bf16 8192-cube GEMM at the burst rate
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(batch):
            torch.mm(a, b)
        e1.record()
        e1.synchronize()
        emit({"kind": "step", "t": time.perf_counter() - t0, "dt": e0.elapsed_time(e1) * 1e-3 / batch})
    del a, b
    torch.cuda.empty_cache()


def training_iteration(torch: Any, row: dict[str, str]) -> Callable[[], float]:
    """validation/train_gptneox.py's iteration of configuration ``row``, built on the GPU: a callable
    that runs one iteration to its synchronisation and returns its wall seconds."""
    from train_gptneox import VOCAB
    from train_hf_parallel import Shape, build_model

    d, h, n = int(row["hidden"]), int(row["heads"]), int(row["layers"])
    seq, b, m = int(row["seq_len"]), int(row["micro_batch"]), int(row["micro_batches"])
    dev = torch.device("cuda")
    model = build_model(torch, Shape(row["name"], d, h, n, seq, b, m), VOCAB, dev)
    if row["recompute"] == "full":
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device=dev).manual_seed(1)
    xs = [torch.randint(0, VOCAB, (b, seq), device=dev, generator=gen) for _ in range(m)]
    torch.cuda.synchronize()

    def iteration() -> float:
        s = time.perf_counter()
        for x in xs:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - s
    return iteration  # the model and optimizer live as long as it does


def train_phase(torch: Any, row: dict[str, str], seconds: float, emit: Any, begin: Any) -> None:
    iteration = training_iteration(torch, row)
    begin()  # the phase's clock starts with the first iteration, not with the model's build
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dt = iteration()
        emit({"kind": "step", "t": time.perf_counter() - t0, "dt": dt})


def burst_then_sustained(torch: Any, row: dict[str, str], gap_s: float, bursts: int, seconds: float, emit: Any,
                         enter: Any) -> None:
    """One configuration's iteration both ways: ``bursts`` iterations each after ``gap_s`` idle seconds
    (phase ``burst:<name>``; the GPU starts each one cool, below its power cap, as the operator
    samples do), then back to back for ``seconds`` (phase ``sustained:<name>``)."""
    iteration = training_iteration(torch, row)
    for _ in range(2):  # allocations and kernel selection, as the protocol's warm-up does
        iteration()
    enter(f"burst:{row['name']}")
    t0 = time.perf_counter()
    for _ in range(bursts):
        time.sleep(gap_s)
        dt = iteration()
        emit({"kind": "step", "t": time.perf_counter() - t0, "dt": dt})
    enter(f"sustained:{row['name']}")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dt = iteration()
        emit({"kind": "step", "t": time.perf_counter() - t0, "dt": dt})


def profile_pair(torch: Any, row: dict[str, str], gap_s: float, seconds: float, record: Any) -> None:
    """One configuration's iteration profiled twice: after ``gap_s`` idle seconds, then after ``seconds``
    of back-to-back iterations (see the module doc)."""
    from torch.profiler import ProfilerActivity, profile
    from train_hf_parallel import summarize_profile

    iteration = training_iteration(torch, row)
    for _ in range(2):
        iteration()

    def profiled(phase: str) -> None:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall = iteration()
        record({"kind": "profile", "phase": phase, "config": row["name"], **summarize_profile(prof, wall)})
    time.sleep(gap_s)
    profiled("cool")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        iteration()
    profiled("loaded")


def profile_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per configuration of a ``--profile-pairs`` run: wall, busy and GEMM ms, cool then loaded."""
    out = ["config   cool: wall  busy  gemm    loaded: wall  busy  gemm   busy loaded/cool"]
    by = {(r["config"], r["phase"]): r for r in rows if r["kind"] == "profile"}
    for name in dict.fromkeys(r["config"] for r in rows if r["kind"] == "profile"):
        c, ld = by.get((name, "cool")), by.get((name, "loaded"))
        if c is None or ld is None:
            continue
        out.append(f"{name:8s} {1e3 * c['wall_s']:10.1f} {1e3 * c['busy_s']:5.1f} {1e3 * c['gemm_s']:5.1f}"
                   f"   {1e3 * ld['wall_s']:12.1f} {1e3 * ld['busy_s']:5.1f} {1e3 * ld['gemm_s']:5.1f}"
                   f"   x{ld['busy_s'] / c['busy_s']:.3f}")
    return out


def pair_figures(rows: list[dict[str, Any]], min_sustained: int = 4) -> dict[str, dict[str, float]]:
    """Per configuration of a ``--pairs`` run, seconds: ``burst`` (the median iteration after idle
    gaps), ``sustained`` and ``sustained_min`` (the median and the fastest of the load's second half),
    ``protocol`` (the fastest of back-to-back iterations 2-9, as validation/train_gptneox.py reports
    it: its first warm-up ran before the load began). Configurations with fewer sustained iterations
    than ``min_sustained`` are left out."""
    out = {}
    for name in dict.fromkeys(r["phase"].split(":", 1)[1] for r in rows if r["phase"].startswith("burst:")):
        burst = [r["dt"] for r in rows if r["kind"] == "step" and r["phase"] == f"burst:{name}"]
        sus = [r for r in rows if r["kind"] == "step" and r["phase"] == f"sustained:{name}"]
        if not burst or len(sus) < min_sustained:
            continue
        half = [r["dt"] for r in sus if r["t"] >= sus[-1]["t"] / 2]
        out[name] = {"burst": statistics.median(burst), "sustained": statistics.median(half),
                     "sustained_min": min(half), "protocol": min(r["dt"] for r in sus[1:9])}
    return out


def pairs_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per configuration, :func:`pair_figures` in ms and the sustained-over-burst ratio."""
    out = ["config   burst ms  sustained ms (2nd half median, min)  sustained/burst  protocol min 4-11"]
    for name, f in pair_figures(rows).items():
        out.append(f"{name:8s} {f['burst'] * 1e3:8.1f}  {f['sustained'] * 1e3:8.1f} {f['sustained_min'] * 1e3:8.1f}"
                   f"                    x{f['sustained'] / f['burst']:.3f}           {f['protocol'] * 1e3:.1f}")
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Per phase: each window's mean time per step over the first 0.5 s's median, its first batch
    left out (iterations: over the 4th
    iteration's, the first the validation protocol may time), with the window's SM clock, power and
    temperature; for iterations also the protocol's figure (the fastest of iterations 4-11) against
    the last third's mean."""
    out = []
    for phase in dict.fromkeys(r["phase"] for r in rows if r["kind"] == "step"):
        steps = [r for r in rows if r["kind"] == "step" and r["phase"] == phase]
        nv = [r for r in rows if r["kind"] == "nvml" and r["phase"] == phase]
        train = phase.startswith("train")
        # the first GEMM batch carries the library's warm-up (4.8 ms a GEMM on machine AM): skipped
        ref = steps[3]["dt"] if train and len(steps) > 3 else statistics.median(
            s["dt"] for s in steps[1:] if s["t"] < 0.5 or s is steps[1])
        out.append(f"{phase}: {len(steps)} steps, reference {ref * 1e3:.3f} ms")
        for lo, hi in WINDOWS:
            w = [s["dt"] for s in steps if lo <= s["t"] < hi]
            v = [r for r in nv if lo <= r["t"] < hi]
            if not w:
                continue
            clocks = (f"  {statistics.median(r['sm_mhz'] for r in v):5.0f} MHz "
                      f"{statistics.median(r['power_w'] for r in v):4.0f} W {max(r['temp_c'] for r in v):3.0f} C"
                      ) if v else ""
            out.append(f"  {lo:5.1f}-{hi:5.1f} s  n {len(w):4d}  x{statistics.mean(w) / ref:.3f}{clocks}")
        if train and len(steps) >= 12:
            proto = min(s["dt"] for s in steps[3:11])
            tail = [s["dt"] for s in steps[-max(1, len(steps) // 3):]]
            out.append(f"  protocol (fastest of iterations 4-11) {proto * 1e3:.1f} ms; last third's mean "
                       f"{statistics.mean(tail) * 1e3:.1f} ms: x{statistics.mean(tail) / proto:.3f}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--idle-s", type=float, default=10.0)
    p.add_argument("--gemm-s", type=float, default=90.0)
    p.add_argument("--cool-s", type=float, default=20.0)
    p.add_argument("--train-s", type=float, default=45.0)
    p.add_argument("--configs", default="c09,c03")
    p.add_argument("--config-csv", default=str(Path(__file__).with_name("configs.csv")),
                   help="comma-separated CSVs of configurations (validation/configs*.csv)")
    p.add_argument("--pairs", default=None, help="configurations to time burst-then-sustained instead of the "
                   "time course (comma-separated names)")
    p.add_argument("--profile-pairs", default=None, help="configurations to profile cool and loaded (one iteration "
                   "each; comma-separated names)")
    p.add_argument("--gap-s", type=float, default=2.0)
    p.add_argument("--bursts", type=int, default=5)
    p.add_argument("--sustain-s", type=float, default=16.0)
    args = p.parse_args()
    import torch

    rows: list[dict[str, Any]] = []
    fh = open(args.out, "a")
    lock = threading.Lock()

    def record(r: dict[str, Any]) -> None:
        with lock:
            rows.append(r)
            fh.write(json.dumps(r) + "\n")
            fh.flush()

    sampler = Sampler(record)

    def emit(r: dict[str, Any]) -> None:
        record({**r, "phase": sampler.phase})

    record({"kind": "meta", "phase": "meta", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__})
    configs = {r["name"]: r for path in args.config_csv.split(",") for r in csv.DictReader(open(path))}
    def each(names: str, phase: str, run: Callable[[dict[str, str]], None],
             summary: Callable[[list[dict[str, Any]]], list[str]]) -> None:
        """Run each named configuration in its phase, a cool pause after each; its line, then the table."""
        for name in names.split(","):
            sampler.enter(f"{phase}:{name}")
            run(configs[name])
            torch.cuda.empty_cache()
            sampler.enter("cool")
            time.sleep(args.cool_s)
            print("\n".join(summary(rows)[-1:]), flush=True)
        sampler.stop = True
        print("\n".join(summary(rows)))

    if args.profile_pairs:
        each(args.profile_pairs, "profile",
             lambda row: profile_pair(torch, row, args.gap_s, args.sustain_s, record), profile_table)
        return
    if args.pairs:
        each(args.pairs, "build", lambda row: burst_then_sustained(torch, row, args.gap_s, args.bursts,
                                                                   args.sustain_s, emit, sampler.enter), pairs_table)
        return
    sampler.enter("idle")
    time.sleep(args.idle_s)
    sampler.enter("gemm")
    gemm_phase(torch, args.gemm_s, emit)
    sampler.enter("cool")
    time.sleep(args.cool_s)
    for name in args.configs.split(","):
        sampler.enter(f"build:{name}")
        train_phase(torch, configs[name], args.train_s, emit, lambda n=name: sampler.enter(f"train:{n}"))
        torch.cuda.empty_cache()
        sampler.enter("cool")
        time.sleep(args.cool_s)
    sampler.stop = True
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
