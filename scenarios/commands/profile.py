"""``trainsim profile show NAME``: what a profile was fitted on and which regressor each operator got."""

from __future__ import annotations

import argparse

#: the model whose validation error ``profile show`` puts beside a profile's: the paper's trees beside
#: the efficiency model, and the unconstrained efficiency beside the others
OTHER_MODEL = {"efficiency": "duration", "duration": "efficiency", "monotone": "efficiency"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="inspect a duration profile")
    p.add_argument("action", choices=["show"], help="show: the per-operator model selection")
    p.add_argument("name", help="reference:Perlmutter, reference:Vista, h100-sxm-bf16, roofline[:GPU], "
                                "or a samples folder")
    p.add_argument("--reference-data", metavar="DIR", default=None)
    p.add_argument("--cache-dir", metavar="DIR", default=None)
    p.add_argument("--model", choices=("duration", "efficiency", "monotone"), default=None,
                   help="the regressors to show (default: the profile's; the other model's validation error is "
                        "shown beside, fitted and cached on first use)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainsim.calibration import load_profile
    from trainsim.operators import ConfigError

    if args.name == "roofline" or args.name.startswith("roofline:"):
        show_roofline(args.name, args.json)
        return 0
    profile = load_profile(args.name, reference_dir=args.reference_data, cache_dir=args.cache_dir, model=args.model)
    other = None
    model = getattr(profile, "model", None)
    if model in OTHER_MODEL and not args.name.startswith("transfer:") and any(
            k.startswith("op:") for k in profile.regressors):
        try:
            other = load_profile(args.name, reference_dir=args.reference_data, cache_dir=args.cache_dir,
                                 model=OTHER_MODEL[model])
        except ConfigError as e:  # e.g. a sample directory whose GPU has no datasheet preset
            print(f"trainsim: note: no {OTHER_MODEL[model]} model to compare: {e}")
    show(profile, args.json, other)
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
    profiles = [(g, RooflineProfile(f"roofline:{g.name}", g.peak_flops, g.mem_bw, g.peak_fp8)) for g in specs]
    ref = profiles[0][1]
    what = ("analytic, from the GPU datasheet times learned efficiencies: an operator takes max(launch, max(FLOPs / "
            "peak, bytes / bandwidth) x its slowdown), the median measured / roofline time of its largest shapes "
            f"on {ref.learned_from} (calibration/profiles/roofline_efficiency.json); one slowdown per operator "
            "whatever the shape, so small shapes are priced too fast (transfer:<gpu> is shape-dependent); "
            "collectives use the topology's closed form; `roofline` takes the scenario's GPU, `roofline:<gpu>` "
            "a named one")
    if as_json:
        print_json({"profile": name, "kind": "roofline", "what": what, "learned_from": ref.learned_from,
                    "slowdowns": ref.slowdowns, "launch_s": ref.launch_s,
                    "gpus": [{"gpu": g.name, "peak_flops": p.peak_flops, "peak_fp8": g.peak_fp8, "mem_bw": p.mem_bw,
                              "mem_gib": g.mem_gib, "ridge_flop_per_byte": p.peak_flops / p.mem_bw}
                             for g, p in profiles]})
        return
    print(f"profile {name}: roofline, the GPU datasheet times efficiencies learned on {ref.learned_from}")
    print(f"  operator time = max({ref.launch_s * 1e6:.1f} us launch, max(FLOPs / peak, bytes / bandwidth) x slowdown)")
    print("  slowdown: per operator, the median measured / roofline time of its largest measured shapes; e.g. "
          + ", ".join(f"{k} {ref.slowdowns[k]:.2f}" for k in ("linear1:fwd", "flash_attn:fwd", "layernorm:fwd")
                      if k in ref.slowdowns))
    print("  one slowdown whatever the shape: small shapes run further from the bound and are priced too fast")
    print("  collectives: the topology's closed form; `roofline` takes the scenario's GPU; "
          "`roofline:<gpu>` names one\n")
    print(f"{'gpu':>16}  {'peak (dense fp16/bf16)':>22}  {'memory bandwidth':>16}  {'memory':>8}  {'ridge':>12}")
    for g, p in profiles:
        print(f"{g.name:>16}  {p.peak_flops / 1e12:>16.0f} TFLOP/s  {p.mem_bw / 1e12:>12.3f} TB/s  "
              f"{g.mem_gib:>4.0f} GiB  {p.peak_flops / p.mem_bw:>6.0f} FLOP/B")


def show(profile, as_json: bool, other=None) -> None:
    """Print a fitted profile's per-regressor model selection; ``other``: the same samples fitted
    with the other ``profile.model``, whose validation MAPE is shown beside."""
    from trainsim.calibration.profile import VALIDATION_BAR_PCT
    from trainsim.scenarios.commands.common import print_json

    rows = profile.selection_report()
    model = getattr(profile, "model", "duration")
    other_name = OTHER_MODEL.get(model, "efficiency")
    if other is not None:
        theirs = {(r["operator"], r["direction"]): r["validation_mape_pct"] for r in other.selection_report()}
        for r in rows:
            r[f"{other_name}_mape_pct"] = theirs.get((r["operator"], r["direction"]))
    for r in rows:
        r["above_bar"] = bool(r["validation_mape_pct"] is not None and r["validation_mape_pct"] > VALIDATION_BAR_PCT)
    quirks = list(getattr(profile, "quirks", []) or [])
    above = [f"{r['operator']} {r['direction']}" for r in rows if r["above_bar"]]
    cap = getattr(profile, "power_cap", None)
    curves = {k: [list(knot) for knot in c.knots] for k, c in cap.curves.items()} if cap is not None else None
    host = _host_lines(getattr(profile, "host_overhead", None) or {})
    # how the cached fit chose each regressor's candidate (calibration.selection_record); older caches: unknown
    selection = (getattr(profile, "manifest", None) or {}).get("selection")
    if as_json:
        print_json({"profile": profile.name, "model": model, "validation_bar_pct": VALIDATION_BAR_PCT,
                    "selection": selection,
                    "regressors": rows, "above_bar": above, "quirks": quirks, "power_cap": curves,
                    "power_cap_spread": getattr(cap, "spread", None),
                    "power_cap_gelu": {k: [list(knot) for knot in c.knots] for k, c in cap.gelu_curves.items()}
                    if cap is not None else None,
                    "power_cap_filler_class": dict(cap.filler_class) if cap is not None else None,
                    "power_cap_onset_s": list(cap.onset_s) if cap is not None and cap.onset_s else None,
                    "host_overhead": host})
        return
    print(f"profile {profile.name}: {len(rows)} regressors, profile.model {model}"
          + (f" (validation MAPE of the {other_name} model beside)" if other is not None else ""))
    if selection is not None:
        print(f"model selection: {selection}" + (" (each candidate's validation MAPE as recorded when it was "
                                                 "selected)" if selection.startswith("recorded") else ""))
    print(f"validation bar {VALIDATION_BAR_PCT:g} %: "
          + (f"{len(above)} above it: {', '.join(above)}" if above else "every regressor is below it"))
    if rows:
        keys = [k for k in rows[0] if k != "params"]
        print("  ".join(f"{k:>14}" for k in keys) + "  params")
        for r in rows:
            print("  ".join(f"{_fmt(r[k]):>14}" for k in keys) + "  " + _fmt(r.get("params", "")))
    if curves:
        print("\npower cap under sustained load (power_cap.json; profile.power_cap: false ignores it): "
              "tensor-core work slower than a burst by g at tensor-core share D of the GPU's time")
        for k, knots in curves.items():
            print(f"  {k}: " + ", ".join(f"D {d:.2f} g {g:.3f}" for d, g in knots))
        for k, c in cap.gelu_curves.items():
            print(f"  {k} beside GELUs instead of copies: " + ", ".join(f"D {d:.2f} g {g:.3f}" for d, g in c.knots))
        if cap.filler_class:
            print("  each kind's filler class w (0: as a copy, 1: as a GELU; a stage moves its curve by its "
                  "time-weighted w): " + ", ".join(f"{k} {w:.2f}" for k, w in cap.filler_class.items()))
        if cap.onset_s:
            print(f"  the cap sets in {1e3 * cap.onset_s[0]:.0f}-{1e3 * cap.onset_s[1]:.0f} ms into back-to-back "
                  "load: samples of longer tensor-core kernels were timed partly capped and are taken out of it first")
        if getattr(cap, "spread", 0.0):
            print(f"  GPUs of this kind differ by {100 * cap.spread:.2f} % (relative s.d.) under the cap: "
                  "a job of n GPUs is priced at its slowest's (docs/efficiency.md)")
    if host:
        print("\nhost (CPU) cost per runtime (host_overhead.json, calibration/host_overhead.py): ms per layer and "
              "micro-batch, ms per iteration; the slowest rank's lag where the ranks meet inside every layer "
              "(rank_lag.json, calibration/rank_spread.py)")
        for rt, h in host.items():
            lag = h.get("rank_lag")
            print(f"  {rt}: {h['per_layer_ms']:.3f} ms, {h['per_iteration_ms']:.2f} ms ({h['overlap']})"
                  + (", slowest of " + ", ".join(f"{n} ranks x{v:.3f}" for n, v in lag.items())
                     + f" (others: normal spread, sigma {h['rank_sigma']:.3f})" if lag else ""))
    if quirks:
        print(f"\n{len(quirks)} data quirks found in the samples (kept as measured):")
        for q in quirks:
            print(f"  {q}")


def _host_lines(table: dict[str, dict]) -> dict[str, dict]:
    """Per runtime of a profile's host table: its line in ms and, where it has one, the measured rank lag."""
    out: dict[str, dict] = {}
    for rt, e in sorted(table.items()):
        out[rt] = {"per_layer_ms": 1e3 * e["per_layer_s"], "per_iteration_ms": 1e3 * e["per_iteration_s"],
                   "overlap": e["overlap"]}
        if e.get("rank_lag"):
            out[rt]["rank_lag"] = dict(sorted(e["rank_lag"].items()))
            out[rt]["rank_sigma"] = e["rank_sigma"]
    return out


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ",".join(f"{k}={val}" for k, val in v.items())
    return str(v)
