"""Is it the GEMM's size or the filler's that keeps a training iteration's GEMMs from throttling?

Machine DZ (docs/efficiency.md) measured, on one H200: every GEMM of train_3d.py's d2048-L8-b2 shape,
run alone back to back, slows x1.15-1.20 from its first 20 ms to its sustained rate, as the power probe's
8192-cube GEMM does; inside a loaded d2048 iteration (the cap active, ~1,700 MHz, 690 W) the same GEMMs
run at their cool rate, where the power-cap curves (GEMM + 256 MiB copies or GELUs, D ~0.6) charge
x1.08-1.11. A 2 x 2 design at D ~0.6 tells which side of the mix matters:

* ``cube+copies``, ``cube+adds``: the 8192-cube GEMM, then 256 MiB copies or small adds (4096 x 2048
  bf16, as train_3d.py's residual and bias adds at 4096 tokens);
* ``small+copies``, ``small+adds``: three GEMMs of train_3d.py's QKV (4096 x 2048 -> 6144), the same fillers;
* ``cube+idle<N>``: four cube GEMMs, a synchronisation and N ms of host sleep (the GPU idle), D ~0.4-0.8;
* ``smallg``, ``smallg+adds``: the small GEMMs on a trained layer's operands (GELU outputs, weights
  N(0, 0.02)): does the data's power matter?

Each cycle (GEMMs then fillers) is one CUDA graph, so the host never paces it. Per configuration: after
``--idle-s`` idle seconds, its first ~20 ms of back-to-back cycles (``cool``), then ``--sustain-s`` seconds
of them (``sustained``: the mean of the last third). Each part alone is measured the same way, so a mix's
D is its GEMMs' cool time over the cycle's cool time, and its g the mix's sustained cycle less its
fillers' sustained time, over its GEMMs' cool time (the power probe's definitions, calibration/power_bench.py).
JSON lines in ``--out``; a table last.

    PYTHONPATH=. python validation/probe_filler_size.py --out out/filler_size.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

#: (name, GEMM part, GEMM count, filler part, filler count); "idle<N>" fillers are N ms of host sleep
MIXES = (("cube", "cube", 1, None, 0), ("small", "small", 3, None, 0), ("copies", None, 0, "copy", 7),
         ("adds", None, 0, "add", 75), ("cube+copies", "cube", 1, "copy", 7), ("cube+adds", "cube", 1, "add", 75),
         ("small+copies", "small", 3, "copy", 2), ("small+adds", "small", 3, "add", 22),
         ("smallg", "smallg", 3, None, 0), ("smallg+adds", "smallg", 3, "add", 22),
         ("cube+idle8", "cube", 4, "idle8", 1), ("cube+idle4", "cube", 4, "idle4", 1),
         ("cube+idle1.5", "cube", 4, "idle1.5", 1), ("idle8", None, 0, "idle8", 1), ("idle4", None, 0, "idle4", 1),
         ("idle1.5", None, 0, "idle1.5", 1))

#: the rows that measure each part alone, and how many of the part they run
FILLER_ROWS = {"copy": "copies", "add": "adds"}
PART_COUNTS = {"cube": 1, "small": 3, "smallg": 3, "copy": 7, "add": 75}


def parts(torch: Any) -> dict[str, Callable[[], Any]]:
    def r(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    a, b = r(8192, 8192), r(8192, 8192)
    x, w = r(4096, 2048), r(6144, 2048)
    xg, wg = torch.nn.functional.gelu(r(4096, 2048)), 0.02 * r(6144, 2048)  # a trained layer's operands
    src = torch.empty(128 * 2**20, device="cuda", dtype=torch.bfloat16)  # 256 MiB
    dst = torch.empty_like(src)
    p, q = r(4096, 2048), r(4096, 2048)
    return {"cube": lambda: torch.mm(a, b), "small": lambda: torch.nn.functional.linear(x, w),
            "smallg": lambda: torch.nn.functional.linear(xg, wg),
            "copy": lambda: dst.copy_(src), "add": lambda: torch.add(p, q)}


def cycle(torch: Any, ops: dict[str, Callable[[], Any]], gemm: str | None, n_gemm: int, filler: str | None,
          n_fill: int) -> Callable[[], None]:
    """One cycle as a callable: a CUDA graph of the GEMMs and the device fillers; an idle filler synchronises
    and sleeps on the host after the graph."""
    device_fill = filler if filler and not filler.startswith("idle") else None
    graph = torch.cuda.CUDAGraph()
    body = ([ops[gemm]] * n_gemm if gemm else []) + ([ops[device_fill]] * n_fill if device_fill else [])
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in body:  # warm-up outside the graph, as torch's graph capture asks
            f()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    if body:
        with torch.cuda.graph(graph):
            for f in body:
                f()
    idle_ms = float(filler[4:]) if filler and filler.startswith("idle") else 0.0

    def run() -> None:
        if body:
            graph.replay()
        if idle_ms:
            torch.cuda.synchronize()
            time.sleep(idle_ms * 1e-3)
    return run


def per_cycle(torch: Any, run: Callable[[], None], n: int) -> float:
    """Seconds per cycle over ``n`` cycles, by the wall clock around a synchronised batch (a host sleep
    is part of an idle cycle, so CUDA events would not see it)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def measure(torch: Any, run: Callable[[], None], idle_s: float, sustain_s: float) -> dict:
    run()
    torch.cuda.synchronize()
    one = per_cycle(torch, run, 2)
    time.sleep(idle_s)
    batch = max(1, int(0.02 / max(one, 1e-6)))
    cool = per_cycle(torch, run, batch)
    per, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < sustain_s:
        per.append(per_cycle(torch, run, batch))
    return {"cool_ms": 1e3 * cool, "sustained_ms": 1e3 * statistics.mean(per[-max(1, len(per) // 3):]),
            "batch": batch, "end_unix": time.time()}


def analyse(rows: dict[str, dict]) -> list[str]:
    """D and g of each mix from its parts' rows (the first row of each name)."""
    out = []
    for name, gemm, n_gemm, filler, n_fill in MIXES:
        if not (gemm and filler) or name not in rows:
            continue
        g_part, f_part = rows.get(gemm), rows.get(FILLER_ROWS.get(filler, filler))
        if not g_part or not f_part:
            continue
        gemm_cool = g_part["cool_ms"] * n_gemm / PART_COUNTS[gemm]
        fill_sustained = f_part["sustained_ms"] * n_fill / PART_COUNTS.get(filler, 1)
        mix = rows[name]
        d = gemm_cool / mix["cool_ms"]
        g = (mix["sustained_ms"] - fill_sustained) / gemm_cool
        lone = g_part["sustained_ms"] / g_part["cool_ms"]
        out.append(f"{name:14s} D {d:.2f}  g {g:.3f}  (lone GEMM {lone:.3f})  cycle {mix['cool_ms']:.3f} -> "
                   f"{mix['sustained_ms']:.3f} ms")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--sustain-s", type=float, default=6.0)
    p.add_argument("--analyse", action="store_true", help="only print the table of --out")
    args = p.parse_args()
    rows: dict[str, dict] = {}
    if not args.analyse:
        import torch

        ops = parts(torch)
        with open(args.out, "a") as fh:
            for name, gemm, n_gemm, filler, n_fill in MIXES:
                r = {"name": name, **measure(torch, cycle(torch, ops, gemm, n_gemm, filler, n_fill),
                                             args.idle_s, args.sustain_s), "gpu": torch.cuda.get_device_name()}
                fh.write(json.dumps(r) + "\n")
                fh.flush()
                print(f"{name:14s} cool {r['cool_ms']:8.3f} ms  sustained {r['sustained_ms']:8.3f} ms  "
                      f"x{r['sustained_ms'] / r['cool_ms']:.3f}", flush=True)
    for line in open(args.out):
        r = json.loads(line)
        rows.setdefault(r["name"], r)
    print("\n".join(analyse(rows)))


if __name__ == "__main__":
    main()
