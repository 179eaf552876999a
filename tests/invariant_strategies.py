"""Legal operator shapes for the invariant tests (tests/test_invariants.py): hypothesis strategies,
a numpy sampler for the fine-step measurement, and the two ways a shape grows.

A shape is legal as the models the simulator builds are: ``d`` a multiple of 128 and of ``h``,
head dimension ``d/h`` 64 or 128, ``mp`` in {1, 2, 4, 8} dividing ``h``, ``kv`` 0 (multi-head),
1 (multi-query) or ``h/r`` with ``r`` in {2, 4, 8} dividing ``h`` (grouped-query), ``f`` 0 (4d) or a
multiple of 256 near a fixed ratio of ``d`` (SwiGLU's 8/3, or 3.5), ``v`` a real vocabulary
(32000, 50432, 128256, 256000; each divisible by every mp). The ranges reach far outside the
profile's sampled box on both sides (b 1..256, l 128..131072, d 256..32768 against sampled
b <= 64, l <= 32512, d 512..18432).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from trainsim.operators.ops import Op, OpKind

B_MAX, L_MIN, L_MAX, D_MIN, D_MAX = 256, 128, 131072, 256, 32768
HEAD_DIMS = (64, 128)
MPS = (1, 2, 4, 8)
VOCABS = (32000, 50432, 128256, 256000)
KV_MODES = ("mha", "mqa", "gqa2", "gqa4", "gqa8")
FFN_RATIOS = (0.0, 8 / 3, 3.5)  # 0: the default f = 4d
LAYERS_MAX = 128


@dataclass(frozen=True)
class Shape:
    b: int
    l: int  # noqa: E741 - the paper's name
    d: int
    h: int
    mp: int
    kv: int
    f: int
    v: int
    layers: int
    ffn_ratio: float  # how f follows d on a fine step (0: f stays 0, i.e. 4d)

    @property
    def head_dim(self) -> int:
        return self.d // self.h

    def op(self, kind: OpKind) -> Op:
        return Op(kind, b=self.b, l=self.l, d=self.d, h=self.h, mp=self.mp, v=self.v, f=self.f,
                  layers=self.layers, kv=self.kv)

    def check(self) -> None:
        """The legality rules of the module doc (raises AssertionError)."""
        assert self.d % 128 == 0 and self.d % self.h == 0 and self.head_dim in HEAD_DIMS, self
        assert self.mp in MPS and self.h % self.mp == 0, self
        assert self.kv in (0, 1) or (self.kv > 1 and self.h % self.kv == 0), self
        assert self.f == 0 or (self.f % 256 == 0 and self.f % self.mp == 0), self
        assert self.b >= 1 and self.l >= 1 and self.layers >= 1 and self.v % self.mp == 0, self


def _ffn(ratio: float, d: int) -> int:
    return 0 if ratio == 0 else 256 * math.ceil(ratio * d / 256)


def _group(kv_mode: str) -> int:
    """Query heads per key/value head that ``h`` must be divisible by (1: multi-head or multi-query)."""
    return int(kv_mode[3:]) if kv_mode.startswith("gqa") else 1


def _kv(mode: str, h: int) -> int:
    if mode == "mha":
        return 0
    return 1 if mode == "mqa" else h // _group(mode)


def d_unit(head_dim: int, mp: int, kv_group: int = 1) -> int:
    """The smallest step of d that keeps the head dimension and every divisibility rule."""
    return max(128, head_dim * mp, head_dim * kv_group)


def units_range(head_dim: int, mp: int, kv_mode: str) -> tuple[int, int]:
    """The multiples of :func:`d_unit` that put d in [D_MIN, D_MAX]."""
    u = d_unit(head_dim, mp, _group(kv_mode))
    return max(1, -(-D_MIN // u)), D_MAX // u


def make_shape(b: int, l: int, d_units: int, head_dim: int, mp: int, kv_mode: str, ffn_ratio: float,  # noqa: E741
               v: int, layers: int) -> Shape:
    """A legal shape with d = d_units * d_unit(head_dim, mp, the kv group)."""
    d = d_units * d_unit(head_dim, mp, _group(kv_mode))
    h = d // head_dim
    s = Shape(b, l, d, h, mp, _kv(kv_mode, h), _ffn(ffn_ratio, d), v, layers, ffn_ratio)
    s.check()
    return s


# ----------------------------------------------------------------------------- hypothesis

sizes_b = st.one_of(st.sampled_from([1, 2, 4, 8, 16, 64, 128, 256]), st.integers(1, B_MAX))
sizes_l = st.one_of(st.sampled_from([128, 256, 1024, 2048, 4096, 8192, 32768, 65536, 131072]),
                    st.integers(L_MIN, L_MAX))


@st.composite
def shapes(draw, b=sizes_b, l=sizes_l) -> Shape:  # noqa: E741
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    mp = draw(st.sampled_from(MPS))
    kv_mode = draw(st.sampled_from(KV_MODES))
    lo, hi = units_range(head_dim, mp, kv_mode)
    units = draw(st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi)))
    return make_shape(draw(b), draw(l), units, head_dim, mp, kv_mode,
                      draw(st.sampled_from(FFN_RATIOS)), draw(st.sampled_from(VOCABS)),
                      draw(st.one_of(st.sampled_from([1, 2, 12, LAYERS_MAX]), st.integers(1, LAYERS_MAX))))


# ----------------------------------------------------------------------------- numpy sampler


def random_shape(rng: np.random.Generator) -> Shape:
    """One shape of the same space, log-uniform in b, l and d (the fine-step measurement)."""
    head_dim = int(rng.choice(HEAD_DIMS))
    mp = int(rng.choice(MPS))
    kv_mode = str(rng.choice(KV_MODES))
    lo, hi = units_range(head_dim, mp, kv_mode)
    units = int(np.clip(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))), lo, hi))
    b = int(np.clip(round(math.exp(rng.uniform(0, math.log(B_MAX)))), 1, B_MAX))
    l = int(np.clip(round(math.exp(rng.uniform(math.log(L_MIN), math.log(L_MAX)))), L_MIN, L_MAX))  # noqa: E741
    return make_shape(b, l, units, head_dim, mp, kv_mode, float(rng.choice(FFN_RATIOS)),
                      int(rng.choice(VOCABS)), int(rng.integers(1, LAYERS_MAX + 1)))


# ----------------------------------------------------------------------------- growing a shape

#: the sizes an operator's work grows with: optimizer kinds price the model (d, layers), the
#: others one micro-batch (b, l, d)
def axes(kind: OpKind) -> tuple[str, ...]:
    return ("d", "layers") if kind.is_optimizer else ("b", "l", "d")


def scaled(s: Shape, axis: str, k: int) -> Shape:
    """``s`` with exactly one of b, l, d, layers times ``k``; d keeps the head dimension (h, kv and
    a set f scale with it)."""
    if axis == "d":
        out = dataclasses.replace(s, d=s.d * k, h=s.h * k, kv=s.kv * k if s.kv > 1 else s.kv, f=s.f * k)
    else:
        out = dataclasses.replace(s, **{axis: getattr(s, axis) * k})
    out.check()
    return out


def stepped(s: Shape, axis: str) -> tuple[Shape, int]:
    """``s`` one fine step larger in ``axis`` (b + 1, l + 128, layers + 1, d + its smallest legal
    step at the same head dimension: 128, or head_dim * mp, or head_dim * the kv group), and the step."""
    if axis == "b":
        return dataclasses.replace(s, b=s.b + 1), 1
    if axis == "l":
        return dataclasses.replace(s, l=s.l + 128), 128
    if axis == "layers":
        return dataclasses.replace(s, layers=s.layers + 1), 1
    group = s.h // s.kv if s.kv > 1 else 1
    step = d_unit(s.head_dim, s.mp, group)
    d = s.d + step
    h = d // s.head_dim
    out = dataclasses.replace(s, d=d, h=h, kv=h // group if s.kv > 1 else s.kv, f=_ffn(s.ffn_ratio, d))
    out.check()
    return out, step
