"""Invariants of the pricing, as property tests (issue 9, item 2).

* Every operator's price is finite and positive, at any legal shape: inside the shipped profile's
  sampled range and far outside it on both sides (b 1..256, l 128..131072, d 256..32768).
* No operator is faster than its hardware bound: the efficiency model never prices an operator
  under its FLOPs at the GPU's tensor peak at its highest clock, nor under a microsecond (the
  measured launch term is a reference, not a bound: GPU-only samples run under it).
* More work is never faster: an operator's price never falls when one of b, l, d (or, for the
  update kinds, d or the layers) is multiplied by an integer >= 2; for the duration model (monotone
  trees) also when it grows by one fine step (b + 1, l + 128, d + its smallest legal step).
* The iteration: more layers, more micro-batches, a larger micro-batch, a longer sequence or a
  wider model never give a shorter Eq. 7 iteration.

The shipped profile is loaded through the session's profile cache (conftest's ``TRAINSIM_CACHE``),
as every test of the shipped profile is; in a run of this file alone a cold cache fits both models
first (about 40 s on 2 cores). ``TRAINSIM_CACHE=~/.cache/trainsim/profiles python -m pytest
tests/test_invariants.py`` reuses the command line's cache instead.

``python tests/test_invariants.py [STEPS]`` prints the fine-step measurement: per operator,
direction and model, how often one fine step (or one doubling) makes the price fall and by how much.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from invariant_strategies import Shape, axes, make_shape, random_shape, scaled, shapes, stepped, units_range

import trainsim
from trainsim.calibration import load_profile
from trainsim.calibration.efficiency import FP8_GEMMS
from trainsim.calibration.profile import ExtrapolationWarning, FittedProfile
from trainsim.calibration.samples import DataQuirkWarning
from trainsim.operators import ConfigError
from trainsim.operators.ops import Direction, Op, OpKind, features, flops

PROFILE = "h100-sxm-bf16"
MODELS = ("efficiency", "duration", "monotone")
TRANSFER = "transfer:a100-sxm4-80gb"

# The datasheet peaks (topology.hardware) are quoted at one clock. The H100 SXM's 989 TFLOP/s dense
# BF16 (1,979 FP8) is 132 SMs x 4,096 dense FLOP per SM and clock at 1,830 MHz, the boost clock the
# datasheet's figure assumes; nvidia-smi on the lent H100s reports a maximum SM clock of 1,980 MHz,
# so the strict physical bound is the datasheet peak x 1980 / 1830 (1,070 TFLOP/s): no kernel can
# beat that, whatever the measured slowdown says. The A100 SXM's 312 TFLOP/s (108 SMs x 2,048 x
# 1,410 MHz) is already at its maximum boost clock, 1,410 MHz.
PEAK_CLOCK_RATIO = {"h100-sxm": 1980 / 1830, "a100-sxm4-80gb": 1.0}
ROUNDING = 1e-9  # relative slack for float rounding only (roofline x slowdown, exp of a float32 sum)
#: no shrinking: every example checks every operator, a failure names the exact shapes, and shrinking
#: a batch over ~75 regressors costs minutes
FAST = (Phase.explicit, Phase.reuse, Phase.generate)


def directions(kind: OpKind) -> tuple[Direction, ...]:
    return (Direction.UPDATE,) if kind.is_optimizer else (Direction.FWD, Direction.BWD)


KINDS = list(OpKind)
OP_KEYS = [(k, d) for k in KINDS for d in directions(k)]


def seconds(prof: FittedProfile, kind: OpKind, direction: Direction, batch: Sequence[Shape],
            refusals: bool = False) -> np.ndarray:
    """Prices of ``kind`` at every shape of ``batch``; a profile's refusal (ConfigError: an invalid
    prediction) fails the test naming the batch, unless ``refusals`` lets it through."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # outside the sampled range on purpose
        try:
            return prof.op_seconds([s.op(kind) for s in batch], direction)
        except ConfigError as e:
            if refusals:
                raise
            pytest.fail(f"profile {prof.name} ({prof.model}) refused {kind.value} {direction.value} at "
                        f"{[s.op(kind) for s in batch]}: {e}")


def _load(name: str, model: str | None = None) -> FittedProfile:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQuirkWarning)
        return load_profile(name, model=model)


@pytest.fixture(scope="module")
def profiles() -> dict[str, FittedProfile]:
    out = {m: _load(PROFILE, m) for m in MODELS}
    out["transfer"] = _load(TRANSFER)
    assert all(out[m].model == m for m in MODELS)
    return out


def _inside(prof: FittedProfile, kind: OpKind, direction: Direction, s: Shape) -> bool:
    """Whether the shape's features lie in the regressor's sampled range (a monotone efficiency
    regressor's extra log roofline column is derived from them and not checked)."""
    reg = prof.regressors[f"op:{kind.value}:{direction.value}"]
    x = np.asarray(features(s.op(kind)), dtype=float)
    return bool(((x >= reg.feature_min[:len(x)]) & (x <= reg.feature_max[:len(x)])).all())


def _describe(kind: OpKind, direction: Direction, prof: FittedProfile, s: Shape) -> str:
    where = "inside" if _inside(prof, kind, direction, s) else "outside"
    return f"{s.op(kind)} (features {tuple(float(v) for v in features(s.op(kind)))}, {where} the sampled range)"


def test_the_parametrization_covers_every_operator_of_the_profile(profiles):
    keys = {f"op:{k.value}:{d.value}" for k, d in OP_KEYS}
    for name in MODELS:
        have = {k for k in profiles[name].regressors if k.startswith("op:")}
        assert have <= keys, f"{name}: operators no invariant test draws: {sorted(have - keys)}"
        assert len(have) >= 70, f"{name}: the shipped profile lost operators: {len(have)}"


# ----------------------------------------------------------------------------- finite and positive

#: the corners of the drawn space: every extreme of b, l, d, head dim, mp and layers at once
CORNERS = [make_shape(b, l, units, hd, mp, kv, ratio, v, layers)
           for b in (1, 256) for l in (128, 131072) for hd in (64, 128) for mp in (1, 8)  # noqa: E741
           for kv, ratio, v in (("mha", 0.0, 50432), ("gqa8", 8 / 3, 128256))
           for units in units_range(hd, mp, kv) for layers in (1, 128)]


def _check_finite_positive(prof: FittedProfile, batch: Sequence[Shape], skip_fp8: bool = False) -> None:
    for kind, direction in OP_KEYS:
        if f"op:{kind.value}:{direction.value}" not in prof.regressors or (skip_fp8 and kind in FP8_GEMMS):
            continue
        t = seconds(prof, kind, direction, batch)
        bad = ~(np.isfinite(t) & (t > 0))
        assert not bad.any(), (f"profile {prof.name} ({prof.model}): {kind.value} {direction.value} priced "
                               f"{t[bad][0]!r} s at {_describe(kind, direction, prof, batch[int(np.argmax(bad))])}")


@pytest.mark.parametrize("model", [*MODELS, "transfer"])
def test_the_corners_are_priced_finite_and_positive(profiles, model):
    _check_finite_positive(profiles[model], CORNERS, skip_fp8=model == "transfer")


@pytest.mark.parametrize("model", [*MODELS, "transfer"])
@settings(max_examples=20, deadline=None, phases=FAST)
@given(batch=st.lists(shapes(), min_size=1, max_size=8))
def test_every_operator_is_priced_finite_and_positive(profiles, model, batch):
    _check_finite_positive(profiles[model], batch, skip_fp8=model == "transfer")


def test_a_transfer_without_fp8_refuses_fp8_gemms(profiles):
    with pytest.raises(ConfigError, match="FP8"):
        seconds(profiles["transfer"], OpKind.FP8_LINEAR1, Direction.FWD, CORNERS[:1], refusals=True)


# ----------------------------------------------------------------------------- the hardware bound


def _check_bound(prof: FittedProfile, batch: Sequence[Shape]) -> None:
    target = prof.target
    assert target is not None, prof.name
    ratio = PEAK_CLOCK_RATIO[target.gpu]
    for kind, direction in OP_KEYS:
        if f"op:{kind.value}:{direction.value}" not in prof.regressors:
            continue
        if kind in FP8_GEMMS and target.peak_fp8 <= 0:
            continue  # refused (test above)
        peak_max = (target.peak_fp8 if kind in FP8_GEMMS else target.peak_flops) * ratio
        t = seconds(prof, kind, direction, batch)
        bound = np.array([flops(s.op(kind), direction) for s in batch]) / peak_max
        for i in range(len(batch)):
            what = f"{prof.name}: {kind.value} {direction.value} at {_describe(kind, direction, prof, batch[i])}"
            assert t[i] * (1 + ROUNDING) >= bound[i], (
                f"{what}: {t[i] * 1e6:.3f} us, faster than its FLOPs at the {target.gpu}'s peak at its maximum "
                f"clock ({bound[i] * 1e6:.3f} us, {t[i] / bound[i]:.3f}x)")
            # a kernel's GPU time is at least a microsecond (1.3 us measured for an empty backward,
            # validation/gpu_time_hf_h100/ab_megatron.txt); the roofline's launch term (14 us, timed with
            # the launch) is a reference, not a bound, since GPU-only samples (--gpu-time) run under it
            assert t[i] * (1 + ROUNDING) >= 1e-6, f"{what}: {t[i] * 1e6:.3f} us, under a microsecond"


@pytest.mark.parametrize("model", ["efficiency", "transfer"])
def test_the_corners_respect_the_hardware_bound(profiles, model):
    _check_bound(profiles[model], CORNERS)


@pytest.mark.parametrize("model", ["efficiency", "monotone", "transfer"])
@settings(max_examples=20, deadline=None, phases=FAST)
@given(batch=st.lists(shapes(), min_size=1, max_size=8))
def test_no_operator_is_faster_than_its_hardware_bound(profiles, model, batch):
    _check_bound(profiles[model], batch)


def test_a_slowdown_learned_under_the_launch_term_does_not_outrun_another_gpus_tensor_cores(profiles):
    # found by the property above (2026-11-27, CI): the H100's GPU-only linear3 runs under its launch
    # term at this shape (slowdown 0.87 over it); on the A100 the FLOPs dominate the roofline, and the
    # same slowdown priced the GEMM 13.85 us against its 15.95 us at the A100's peak
    from trainsim.operators.ops import Op

    op = Op(OpKind.LINEAR3, b=13, l=531, d=1024, h=8, mp=8, v=128256, f=2816, layers=113)
    prof = profiles["transfer"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        t = float(prof.op_seconds([op], Direction.FWD)[0])
    assert t * (1 + ROUNDING) >= flops(op, Direction.FWD) / prof.target.peak_flops


# ----------------------------------------------------------------------------- more work is never faster


@st.composite
def growths(draw) -> tuple[Shape, int, int]:
    """A shape, which of an operator's axes grows (index, modulo their number) and by what factor."""
    return draw(shapes()), draw(st.integers(0, 5)), draw(st.integers(2, 4))


def grow(kind: OpKind, growth: tuple[Shape, int, int], fine: bool) -> tuple[Shape, Shape, str]:
    s, pick, k = growth
    axis = axes(kind)[pick % len(axes(kind))]
    if fine:
        g, step = stepped(s, axis)
        return s, g, f"{axis} + {step}"
    return s, scaled(s, axis, k), f"{axis} x{k}"


def falls(prof: FittedProfile, kind: OpKind, pairs: Sequence[tuple[Shape, Shape, str]]) -> list[str]:
    """One line per direction in which a larger shape of ``pairs`` is priced faster (its worst pair)."""
    out = []
    for direction in directions(kind):
        t_small = seconds(prof, kind, direction, [p[0] for p in pairs])
        t_large = seconds(prof, kind, direction, [p[1] for p in pairs])
        ratio = t_large / t_small
        if (ratio < 1).any():
            i = int(np.argmin(ratio))
            s, g, how = pairs[i]
            out.append(f"{kind.value} {direction.value} is faster with {how}: {t_small[i] * 1e6:.3f} us -> "
                       f"{t_large[i] * 1e6:.3f} us ({ratio[i]:.3f}x); {_describe(kind, direction, prof, s)} -> "
                       f"{_describe(kind, direction, prof, g)}")
    return out


def _check_growth(prof: FittedProfile, batch: Sequence[tuple[Shape, int, int]], fine: bool) -> None:
    found = [line for kind in KINDS if f"op:{kind.value}:{directions(kind)[0].value}" in prof.regressors
             for line in falls(prof, kind, [grow(kind, g, fine) for g in batch])]
    assert not found, f"profile {prof.name} ({prof.model}): {len(found)} operators priced faster with more " \
                      f"work:\n" + "\n".join(found)


@pytest.mark.parametrize("model", [m for m in MODELS if m != "efficiency"])
@settings(max_examples=40, deadline=None, phases=FAST)
@given(batch=st.lists(growths(), min_size=1, max_size=6))
def test_more_work_is_never_faster(profiles, model, batch):
    # each example grows every shape of the batch along one axis of every operator kind (b, l or d;
    # d or layers for the update kinds) by a factor 2..4, and prices both in every direction
    _check_growth(profiles[model], batch, fine=False)


# The default efficiency model (trees on the slowdown, piecewise constant) prices some shapes faster
# after a step or a doubling: a known, open violation of issue 9's invariant (docs/efficiency.md,
# "Invariants"). Until it is monotone, this bounds how often and how far it breaks, on fixed random
# shapes, so that a change that makes it worse fails. Measured 2026-11-29 (200 shapes per operator and
# direction, 83 of them), after a residual add's backward (no work on the roofline) became its samples'
# median: doublings fall 0.63 % of the time on average (47 operators at least once), worst 40.3 %
# (fp8_linear1 backward); fine steps 1.44 %, worst 44.3 % (embedding backward). Before, 1.05 % / 54.6 %
# and 1.61 % / 80.4 %, both worst at that residual add. The bounds leave about a third of the share and a
# tenth of the worst for library versions.
EFFICIENCY_FALLS = {False: (0.0085, 0.45), True: (0.019, 0.50)}  # fine -> (mean share falling, worst fall)


def test_an_operator_without_work_on_the_roofline_costs_the_same_at_every_shape(profiles):
    # a residual add's backward moves nothing (ops.bytes_moved): its efficiency regressor is its samples'
    # median slowdown, so it is priced alike from the smallest shape to far outside the sampled range
    prof = profiles["efficiency"]
    grid = ((1, 128, 256), (8, 4096, 8192), (256, 131072, 32768))
    t = prof.op_seconds([Op(OpKind.RES_ADD, b=b, l=l, d=d, mp=1) for b, l, d in grid], Direction.BWD)
    assert prof.regressors["op:res_add:bwd"].summary["kind"] == "constant"
    assert np.all(t == t[0]) and 1e-6 < t[0] < 2e-6  # 1.31 us, the H100's measured median


@pytest.mark.parametrize("fine", [False, True], ids=["doubling", "fine-step"])
def test_the_efficiency_models_falls_stay_as_rare_and_as_small_as_measured(profiles, fine):
    rows = list(_rows(profiles["efficiency"], 200, 0 if fine else 1, fine=fine))
    assert len(rows) == len(OP_KEYS)
    share, worst = float(np.mean([r["falls"] for r in rows])), max(r["worst"] for r in rows)
    top = max(rows, key=lambda r: r["worst"])
    bound_share, bound_worst = EFFICIENCY_FALLS[fine]
    assert share <= bound_share and worst <= bound_worst, (
        f"efficiency model: {share:.2%} of {'fine steps' if fine else 'doublings'} priced faster "
        f"(bound {bound_share:.1%}), worst {worst:.1%} (bound {bound_worst:.0%}) at {top['op']}")


@pytest.mark.parametrize("model", ["duration", "monotone"])
@settings(max_examples=40, deadline=None, phases=FAST)
@given(batch=st.lists(growths(), min_size=1, max_size=6))
def test_one_fine_step_is_never_faster_for_the_monotone_models(profiles, model, batch):
    # the efficiency model's trees predict a ratio, without monotone constraints, so a fine step
    # across a split can fall: measured by fine_step_report, not asserted; the duration trees and
    # profile.model monotone (calibration.profile.ROOFLINE_EXPONENT) are monotone by construction
    _check_growth(profiles[model], batch, fine=True)


# ----------------------------------------------------------------------------- the iteration

SCENARIOS = ("gpt20b-dgxh100", "llama3-8b-dgxh100")


def iteration_s(scenario: str, overrides: dict) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trainsim.predict(trainsim.load_scenario(scenario, overrides=overrides)).iteration_s


def _model_of(scenario: str) -> tuple[int, int, int, int, int, int, int, int]:
    sc = trainsim.load_scenario(scenario)
    m, tr, par = sc.model, sc.training, sc.parallelism
    return m.layers, m.hidden, m.heads, m.ffn_hidden, m.seq_len, tr.micro_batch, tr.micro_batches, par.pp


def grown(scenario: str, base: dict, axis: str, k: int = 1) -> dict:
    """``base`` overrides with one size grown: layers by k pipeline stages' worth, micro-batches by k,
    the micro-batch, the sequence or the width (heads, and a set MLP width, with it) times 2**k."""
    layers, hidden, heads, ffn, seq, b, m, pp = _model_of(scenario)
    cur = {"model.layers": layers, "model.hidden": hidden, "model.heads": heads, "model.seq_len": seq,
           "training.micro_batch": b, "training.micro_batches": m, **({"model.ffn_hidden": ffn} if ffn else {}),
           **base}
    out = dict(base)
    if axis == "layers":
        out["model.layers"] = cur["model.layers"] + k * pp
    elif axis == "micro_batches":
        out["training.micro_batches"] = cur["training.micro_batches"] + k
    elif axis == "micro_batch":
        out["training.micro_batch"] = cur["training.micro_batch"] * 2**k
    elif axis == "seq_len":
        out["model.seq_len"] = cur["model.seq_len"] * 2**k
    elif axis == "hidden":
        for key in ("model.hidden", "model.heads", "model.ffn_hidden"):
            if key in cur:
                out[key] = cur[key] * 2**k
    else:  # pragma: no cover
        raise AssertionError(axis)
    return out


ITER_AXES = ("layers", "micro_batches", "micro_batch", "seq_len", "hidden")


@pytest.mark.parametrize("axis", ITER_AXES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_bundled_iteration_grows_with_the_work(scenario, axis):
    chain = [{}, grown(scenario, {}, axis, 1), grown(scenario, {}, axis, 2)]
    if axis == "micro_batches":
        chain.append(grown(scenario, {}, axis, 16))
    t = [iteration_s(scenario, ov) for ov in chain]
    for i in range(1, len(chain)):
        assert t[i] >= t[i - 1], (f"{scenario}: {chain[i - 1] or 'as bundled'} {t[i - 1]:.4f} s -> {chain[i]} "
                                  f"{t[i]:.4f} s ({t[i] / t[i - 1]:.4f}x)")


@st.composite
def iteration_bases(draw) -> tuple[str, dict]:
    """Smaller and larger models on the bundled layouts: gpt20b (PP4 MP8 DP4, DeepSpeed split) and
    llama3-8b (CP2 DP4, Megatron split, GQA with 8 kv heads)."""
    scenario = draw(st.sampled_from(SCENARIOS))
    pp = _model_of(scenario)[-1]
    llama = scenario.startswith("llama")
    head_dim = 128 if llama else draw(st.sampled_from([64, 128]))
    heads = draw(st.sampled_from([8, 16, 32, 48, 64]))
    base = {"model.hidden": heads * head_dim, "model.heads": heads,
            "model.layers": draw(st.integers(3 * pp, 48)),
            "model.seq_len": draw(st.sampled_from([512, 1024, 2048, 4096, 8192])),
            "training.micro_batch": draw(st.integers(1, 8)), "training.micro_batches": draw(st.integers(1, 48))}
    if llama:
        base["model.ffn_hidden"] = 256 * math.ceil(8 * heads * head_dim / 3 / 256)
    return scenario, base


# found by the random search below (efficiency model) when the iteration was its operators alone: a
# tiny GPT (d 512 or 1024) on the gpt20b layout, whose operators sit at the launch floor, priced faster
# with more work. With the profile as shipped since (its Megatron kinds re-timed on the GPU alone, the
# FLOPs-at-peak floor; docs/efficiency.md) they grow: 1.11x, 1.12x, 1.24x on 2026-11-29. Kept as the
# search's first examples
KNOWN_FALLS = [
    ("gpt20b-dgxh100", {"model.hidden": 512, "model.heads": 8, "model.layers": 44, "model.seq_len": 512,
                        "training.micro_batch": 2, "training.micro_batches": 32}, "seq_len"),
    ("gpt20b-dgxh100", {"model.hidden": 1024, "model.heads": 8, "model.layers": 44, "model.seq_len": 1024,
                        "training.micro_batch": 1, "training.micro_batches": 8}, "micro_batch"),
    ("gpt20b-dgxh100", {"model.hidden": 1024, "model.heads": 16, "model.layers": 44, "model.seq_len": 1024,
                        "training.micro_batch": 1, "training.micro_batches": 32}, "hidden"),
]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(case=iteration_bases(), axis=st.sampled_from(ITER_AXES))
@example(case=KNOWN_FALLS[0][:2], axis=KNOWN_FALLS[0][2])
@example(case=KNOWN_FALLS[1][:2], axis=KNOWN_FALLS[1][2])
@example(case=KNOWN_FALLS[2][:2], axis=KNOWN_FALLS[2][2])
def test_more_work_never_gives_a_shorter_iteration(case, axis):
    scenario, base = case
    big = grown(scenario, base, axis)
    t_base, t_big = iteration_s(scenario, base), iteration_s(scenario, big)
    assert t_big >= t_base, f"{scenario}: {base} {t_base:.4f} s -> {axis} grown {big} {t_big:.4f} s " \
                            f"({t_big / t_base:.4f}x)"


# ----------------------------------------------------------------------------- the fine-step measurement


def _rows(prof: FittedProfile, steps: int, seed: int, fine: bool) -> Iterator[dict]:
    for kind, direction in OP_KEYS:
        rng = np.random.default_rng(seed)
        small = [random_shape(rng) for _ in range(steps)]
        pairs = []
        for s in small:
            axis = str(rng.choice(axes(kind)))
            pairs.append((s, stepped(s, axis)[0] if fine else scaled(s, axis, 2), axis))
        t0 = seconds(prof, kind, direction, [p[0] for p in pairs])
        t1 = seconds(prof, kind, direction, [p[1] for p in pairs])
        rel = 1.0 - t1 / t0  # > 0: the larger shape is priced faster
        worst = int(np.argmax(rel))
        inside = np.array([_inside(prof, kind, direction, p[0]) for p in pairs])
        yield {"op": f"{kind.value}:{direction.value}", "falls": float((rel > 0).mean()),
               "falls_inside": float((rel[inside] > 0).mean()) if inside.any() else float("nan"),
               "worst": float(max(rel[worst], 0.0)), "worst_axis": pairs[worst][2],
               "worst_small": pairs[worst][0].op(kind), "worst_large": pairs[worst][1].op(kind),
               "worst_t": (float(t0[worst]), float(t1[worst]))}


def fine_step_report(steps: int = 2000, seed: int = 0, profs: dict[str, FittedProfile] | None = None) -> list[dict]:
    """Per model, operator and direction, over ``steps`` random legal shapes (log-uniform b, l, d,
    one random axis each): the share of fine steps (and of doublings) priced faster, and the worst
    relative fall with its shapes. Printed as a table; returned as rows."""
    profs = profs or {m: _load(PROFILE, m) for m in MODELS}
    out = []
    for model, prof in profs.items():
        fine = {r["op"]: r for r in _rows(prof, steps, seed, fine=True)}
        coarse = {r["op"]: r for r in _rows(prof, steps, seed + 1, fine=False)}
        print(f"\n{model}: {steps} random steps per operator (fine: b+1, l+128, d+1 legal step, layers+1; "
              f"x2: one axis doubled)")
        print(f"{'operator':26s} {'fine falls':>10s} {'(in range)':>10s} {'worst':>7s} {'x2 falls':>9s} "
              f"{'worst':>7s}  worst fine step")
        for op, r in fine.items():
            c = coarse[op]
            s, g = r["worst_small"], r["worst_large"]
            shape = (f"{r['worst_axis']}: b={s.b} l={s.l} d={s.d} h={s.h} mp={s.mp} kv={s.kv} f={s.f} v={s.v} "
                     f"layers={s.layers} -> {r['worst_axis']}={getattr(g, r['worst_axis'])} "
                     f"{r['worst_t'][0] * 1e6:.1f}->{r['worst_t'][1] * 1e6:.1f} us" if r["worst"] > 0 else "")
            print(f"{op:26s} {r['falls']:10.1%} {r['falls_inside']:10.1%} {r['worst']:7.1%} {c['falls']:9.1%} "
                  f"{c['worst']:7.1%}  {shape}")
            out.append({"model": model, **r, "x2_falls": c["falls"], "x2_worst": c["worst"]})
        rows = [x for x in out if x["model"] == model]
        print(f"{model}: fine steps falling {np.mean([x['falls'] for x in rows]):.1%} on average over operators, "
              f"worst {max(x['worst'] for x in rows):.1%}; doublings falling "
              f"{np.mean([x['x2_falls'] for x in rows]):.1%}, worst {max(x['x2_worst'] for x in rows):.1%}")
    return out


@pytest.mark.skip(reason="measurement: python tests/test_invariants.py [STEPS]")
def test_fine_step_measurement(profiles):  # pragma: no cover
    fine_step_report(profs={m: profiles[m] for m in MODELS})


if __name__ == "__main__":
    fine_step_report(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(case=iteration_bases(), axis=st.sampled_from(ITER_AXES))
def test_more_work_never_gives_a_shorter_iteration_with_the_monotone_model(case, axis):
    # profile.model monotone: every operator is non-decreasing in the work (the tests above), and
    # the iteration built from them is too
    scenario, base = case
    base = {**base, "profile.model": "monotone"}
    big = grown(scenario, base, axis)
    t_base, t_big = iteration_s(scenario, base), iteration_s(scenario, big)
    assert t_big >= t_base, f"{scenario}: {base} {t_base:.4f} s -> {axis} grown {big} {t_big:.4f} s " \
                            f"({t_big / t_base:.4f}x)"
