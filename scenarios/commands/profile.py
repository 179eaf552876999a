"""``trainsim profile show NAME``: what a profile was fitted on and which regressor each operator got."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="inspect a duration profile")
    p.add_argument("action", choices=["show"], help="show: the per-operator model selection")
    p.add_argument("name", help="reference:Perlmutter, reference:Vista, h100-sxm-bf16, roofline[:GPU], "
                                "or a samples folder")
    p.add_argument("--reference-data", metavar="DIR", default=None)
    p.add_argument("--cache-dir", metavar="DIR", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim.calibration import load_profile

    if args.name == "roofline" or args.name.startswith("roofline:"):
        show_roofline(args.name, args.json)
        return 0
    profile = load_profile(args.name, reference_dir=args.reference_data, cache_dir=args.cache_dir)
    show(profile, args.json)
    return 0


def show_roofline(name: str, as_json: bool) -> None:
    """The roofline profile: what it is, its assumed efficiencies, and each GPU's peak and bandwidth.

    ``roofline`` takes the scenario's GPU, so every GPU preset is listed; ``roofline:<gpu>`` one.
    """
    from trainsim.calibration.roofline import RooflineProfile
    from trainsim.operators import ConfigError
    from trainsim.scenarios.commands.common import print_json
    from trainsim.topology import GPU_PRESETS

    gpu = name.partition(":")[2]
    if gpu and gpu.lower() not in GPU_PRESETS:
        raise ConfigError("profile", f"unknown GPU {gpu!r} for the roofline profile; known: {', '.join(GPU_PRESETS)}")
    specs = [GPU_PRESETS[gpu.lower()]] if gpu else list(GPU_PRESETS.values())
    profiles = [(g, RooflineProfile(f"roofline:{g.name}", g.peak_flops, g.mem_bw)) for g in specs]
    ref = profiles[0][1]
    what = ("analytic, from the GPU datasheet, not a measurement: an operator takes launch + max(FLOPs / "
            "(peak x compute efficiency), bytes / (bandwidth x memory efficiency)); collectives use the "
            "topology's closed form. Small, attention-shaped and fused kernels run below these efficiencies, "
            "so it under-predicts; `roofline` takes the scenario's GPU, `roofline:<gpu>` a named one")
    if as_json:
        print_json({"profile": name, "kind": "roofline", "what": what,
                    "compute_efficiency": ref.compute_efficiency, "memory_efficiency": ref.memory_efficiency,
                    "launch_s": ref.launch_s,
                    "gpus": [{"gpu": g.name, "peak_flops": p.peak_flops, "mem_bw": p.mem_bw, "mem_gib": g.mem_gib,
                              "ridge_flop_per_byte": p.peak_flops / p.mem_bw} for g, p in profiles]})
        return
    print(f"profile {name}: roofline, from the GPU datasheet (not a measurement)")
    print(f"  operator time = {ref.launch_s * 1e6:g} us launch + max(FLOPs / (peak x {ref.compute_efficiency:.0%}), "
          f"bytes / (bandwidth x {ref.memory_efficiency:.0%})); the efficiencies are assumptions")
    print("  collectives: the topology's closed form")
    print("  small, attention-shaped and fused kernels run below those efficiencies: it under-predicts")
    print("  `roofline` takes the scenario's GPU; `roofline:<gpu>` names one\n")
    print(f"{'gpu':>16}  {'peak (dense fp16/bf16)':>22}  {'memory bandwidth':>16}  {'memory':>8}  {'ridge':>12}")
    for g, p in profiles:
        print(f"{g.name:>16}  {p.peak_flops / 1e12:>16.0f} TFLOP/s  {p.mem_bw / 1e12:>12.3f} TB/s  "
              f"{g.mem_gib:>4.0f} GiB  {p.peak_flops / p.mem_bw:>6.0f} FLOP/B")


def show(profile, as_json: bool) -> None:
    """Print a fitted profile's per-regressor model selection."""
    from trainsim.scenarios.commands.common import print_json

    rows = profile.selection_report()
    quirks = list(getattr(profile, "quirks", []) or [])
    if as_json:
        print_json({"profile": profile.name, "regressors": rows, "quirks": quirks})
        return
    print(f"profile {profile.name}: {len(rows)} regressors")
    if rows:
        keys = [k for k in rows[0] if k != "params"]
        print("  ".join(f"{k:>14}" for k in keys) + "  params")
        for r in rows:
            print("  ".join(f"{_fmt(r[k]):>14}" for k in keys) + "  " + _fmt(r.get("params", "")))
    if quirks:
        print(f"\n{len(quirks)} data quirks found in the samples (kept as measured):")
        for q in quirks:
            print(f"  {q}")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    return str(v)
