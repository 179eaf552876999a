"""Pipeline schedules: Megatron's counts and the invariants every schedule must keep."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Schedule
from trainsim.sim.schedule import Step, build_schedule, gpipe, interleaved_one_f_one_b, one_f_one_b


def test_one_f_one_b_hand_example():
    # pp=4, m=6, stage 1: 2 warm-up forwards, 4 F/B pairs, 2 drain backwards.
    got = [(s.kind, s.micro) for s in one_f_one_b(4, 6, 1)]
    assert got == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("F", 4), ("B", 2),
                   ("F", 5), ("B", 3), ("B", 4), ("B", 5)]


def test_warmup_capped_by_micro_batches():
    assert [(s.kind, s.micro) for s in one_f_one_b(8, 2, 0)] == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


def test_gpipe_order():
    assert [(s.kind, s.micro) for s in gpipe(3, 3, 1)] == [("F", 0), ("F", 1), ("F", 2), ("B", 2), ("B", 1),
                                                           ("B", 0)]


def _check_common(steps, m, chunks=1):
    seen_f, seen_b = set(), set()
    for s in steps:
        key = (s.micro, s.chunk)
        if s.kind == "F":
            assert key not in seen_f
            seen_f.add(key)
        else:
            assert s.kind == "B"
            assert key in seen_f, "backward before its forward"
            assert key not in seen_b
            seen_b.add(key)
    every = {(i, c) for i in range(m) for c in range(chunks)}
    assert seen_f == every and seen_b == every


@given(pp=st.integers(1, 32), m=st.integers(1, 128), data=st.data())
def test_one_f_one_b_invariants(pp, m, data):
    s = data.draw(st.integers(0, pp - 1))
    steps = one_f_one_b(pp, m, s)
    _check_common(steps, m)
    in_flight = peak = 0
    for step in steps:
        in_flight += 1 if step.kind == "F" else -1
        peak = max(peak, in_flight)
    assert peak <= pp - s
    assert peak == min(pp - s, m)
    if s == pp - 1:
        assert [x.kind for x in steps] == ["F", "B"] * m


@given(pp=st.integers(1, 8), k=st.integers(1, 6), v=st.integers(1, 4), data=st.data())
def test_interleaved_invariants(pp, k, v, data):
    m = pp * k
    s = data.draw(st.integers(0, pp - 1))
    steps = interleaved_one_f_one_b(pp, m, s, v)
    _check_common(steps, m, v)


def test_interleaved_megatron_order():
    # pp=2, v=2, m=4, stage 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards, chunks 0,0,1,1.
    got = [(s.kind, s.micro, s.chunk) for s in interleaved_one_f_one_b(2, 4, 0, 2)]
    assert got[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    assert got[4:6] == [("F", 2, 0), ("B", 0, 1)]


def test_interleaved_needs_divisible_micro_batches():
    with pytest.raises(ConfigError) as e:
        interleaved_one_f_one_b(4, 6, 0, 2)
    assert e.value.field == "training.micro_batches"


def test_build_schedule_dispatch():
    assert build_schedule(Schedule.ONE_F_ONE_B, 2, 2, 0) == one_f_one_b(2, 2, 0)
    assert build_schedule(Schedule.GPIPE, 2, 2, 0) == gpipe(2, 2, 0)
    assert build_schedule(Schedule.INTERLEAVED_1F1B, 2, 2, 0, 1) == one_f_one_b(2, 2, 0)
    assert Step("F", 0) == Step("F", 0, 0)
