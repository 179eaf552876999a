"""Shared links: max-min fair shares, recomputed when transfers start and end."""

import pytest
import simpy

from trainsim.operators.errors import ConfigError
from trainsim.sim.network import Network, max_min_shares


def _run(caps, transfers):
    """transfers: (start_s, base_s, {link: nominal bytes/s}); returns completion times."""
    env = simpy.Environment()
    net = Network(env, caps, record=True)
    done = {}

    def go(i, start, base, rates):
        yield env.timeout(start)
        yield net.transfer_rates(base, rates, f"t{i}")
        done[i] = env.now

    for i, t in enumerate(transfers):
        env.process(go(i, *t))
    env.run()
    return done, net


def test_alone_takes_base_time():
    done, _ = _run({"a": 10.0}, [(0.0, 3.0, {"a": 10.0})])
    assert done[0] == 3.0


def test_two_saturating_on_one_link_take_twice_as_long():
    done, net = _run({"a": 10.0}, [(0.0, 3.0, {"a": 10.0}), (0.0, 3.0, {"a": 10.0})])
    assert done == {0: pytest.approx(6.0), 1: pytest.approx(6.0)}
    assert net.busy["a"] == [[0.0, pytest.approx(6.0), "t0"]]


def test_different_links_do_not_interact():
    done, _ = _run({"a": 10.0, "b": 10.0}, [(0.0, 3.0, {"a": 10.0}), (0.0, 3.0, {"b": 10.0})])
    assert done == {0: 3.0, 1: 3.0}


def test_below_capacity_no_slowdown():
    done, _ = _run({"a": 10.0}, [(0.0, 3.0, {"a": 4.0}), (0.0, 3.0, {"a": 5.0})])
    assert done == {0: 3.0, 1: 3.0}


def test_two_links_limited_by_the_tighter():
    # Flow 0 uses a (cap 10) and b (cap 4); flow 1 saturates b alone. On b: 2x0 + 4x1 <= 4 ...
    # Filling: both rise to x=2/3 where b (2x + 4x = 4) saturates; a never binds.
    done, _ = _run({"a": 10.0, "b": 4.0}, [(0.0, 1.0, {"a": 10.0, "b": 2.0}), (0.0, 1.0, {"b": 4.0})])
    assert done[0] == pytest.approx(1.5) and done[1] == pytest.approx(1.5)


def test_staggered_start_hand_computed():
    # Flow 0 runs alone for 1 s (2 s of work left); from t=1 both run at x=1/2, so flow 0's
    # 2 s of work take 4 s and it ends at t=5, when flow 1 has done 2 of its 3 s of work.
    # At t=5 flow 0 ends; flow 1 has 3 - 2 = 1 s left at x=1 -> ends at 6.
    done, _ = _run({"a": 10.0}, [(0.0, 3.0, {"a": 10.0}), (1.0, 3.0, {"a": 10.0})])
    assert done[0] == pytest.approx(5.0) and done[1] == pytest.approx(6.0)


def test_progressive_filling_three_flows():
    # Links a (cap 1) and b (cap 2). f1 on a, f2 on a and b, f3 on b; each nominal 1 byte/s per link.
    # Level rises together: a saturates at x=1/2 (f1, f2 frozen at 1/2); b then has 2 - 1/2 left for
    # f3 alone, which reaches its cap x=1 first.
    shares = max_min_shares({"f1": {"a": 1.0}, "f2": {"a": 1.0, "b": 1.0}, "f3": {"b": 1.0}}, {"a": 1.0, "b": 2.0})
    assert shares == {"f1": pytest.approx(0.5), "f2": pytest.approx(0.5), "f3": 1.0}
    # With b tighter (cap 0.9): b saturates first at x = 0.45 for f2 and f3; f1 then rises to 0.55 on a.
    shares = max_min_shares({"f1": {"a": 1.0}, "f2": {"a": 1.0, "b": 1.0}, "f3": {"b": 1.0}}, {"a": 1.0, "b": 0.9})
    assert shares == {"f1": pytest.approx(0.55), "f2": pytest.approx(0.45), "f3": pytest.approx(0.45)}


def test_set_capacity_slows_running_transfer():
    env = simpy.Environment()
    net = Network(env, {"a": 10.0})
    out = {}

    def flow():
        yield net.transfer(4.0, {"a": 1.0}, 40.0, "x")  # 10 bytes/s: saturates a
        out["end"] = env.now

    def congest():
        yield env.timeout(1.0)
        net.set_capacity("a", 5.0)  # half speed for the remaining 3 s of work -> 6 s more

    env.process(flow())
    env.process(congest())
    env.run()
    assert out["end"] == pytest.approx(7.0)


def test_bad_capacity_and_unknown_link():
    env = simpy.Environment()
    with pytest.raises(ConfigError):
        Network(env, {"a": 0.0})
    net = Network(env, {"a": 1.0})
    with pytest.raises(ConfigError):
        net.transfer_rates(1.0, {"zz": 1.0}, "x")
    with pytest.raises(ConfigError):
        net.set_capacity("a", -1.0)


def test_capped_rates():
    env = simpy.Environment()
    net = Network(env, {"a": 10.0, "b": 100.0})
    assert net.capped_rates(1.0, {"a": 2.0, "b": 1.0}, 20.0) == {"a": 10.0, "b": 20.0}
