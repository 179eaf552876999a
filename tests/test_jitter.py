"""Jitter models (sim.jitter), the Monte Carlo runner, `trainsim jitter` and its fit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import simpy
import yaml

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.cli import main
from trainsim.scenarios.compose import predict
from trainsim.scenarios.jitter_fit import read_times
from trainsim.scenarios.montecarlo import child_seeds, run_monte_carlo
from trainsim.scenarios.schema import load_scenario, scenario_from_mapping
from trainsim.sim.engine import simulate
from trainsim.sim.jitter import Jitter, congestion_process, transfer_sigma
from trainsim.sim.jitter_config import JITTER_PRESETS, parse_jitter


def tiny_mapping(cluster: str = "vista", pp: int = 2, mp: int = 2, dp: int = 2, m: int = 4, jitter=None) -> dict:
    return {
        "name": "tiny",
        "model": {"name": "tiny", "hidden": 1024, "heads": 16, "layers": 8, "seq_len": 1024, "vocab": 32000},
        "training": {"micro_batch": 1, "micro_batches": m},
        "parallelism": {"pp": pp, "mp": mp, "dp": dp},
        "cluster": {"preset": cluster},
        "profile": {"name": "roofline"},
        "simulation": {"jitter": jitter or {}},
    }


def tiny(**kw):
    sc = scenario_from_mapping(tiny_mapping(**kw))
    return sc, predict(sc).costs


NOISY = {"noise": {"nic": {"sigma": 0.3}}, "congestion": {"nic": {"bandwidth_factor": 0.3, "mean_on_s": 0.01,
                                                                    "mean_off_s": 0.05}}}


# -- parsing ---------------------------------------------------------------------------------------------


def test_off_by_default():
    assert parse_jitter({}) is None
    assert parse_jitter(None) is None
    assert parse_jitter({"preset": "none"}) is None
    assert parse_jitter({"noise": {"nic": {"sigma": 0}}}) is None  # nothing random: off


def test_presets_parse_and_explicit_keys_override():
    for name in JITTER_PRESETS:
        j = parse_jitter({"preset": name})
        assert isinstance(j, Jitter) and j.preset == name
        assert parse_jitter(j.to_mapping()) == Jitter(j.noise, j.congestion, j.compute)  # round trip
    j = parse_jitter({"preset": "vista", "noise": {"nic": {"sigma": 0.5, "kinds": {"dp": 0.1, "dp_allgather": 0.2}}}})
    nic = next(t for t in j.noise if t.tier == "nic")
    assert nic.sigma == 0.5
    assert nic.sigma_for("mp") == 0.5 and nic.sigma_for("dp_allreduce") == 0.1 and nic.sigma_for("dp_allgather") == 0.2
    assert j.congestion == parse_jitter({"preset": "vista"}).congestion  # untouched keys come from the preset


@pytest.mark.parametrize("mapping, field", [
    ({"noise": {"nic": {"sigma": -0.1}}}, "simulation.jitter.noise.nic.sigma"),
    ({"noise": {"nic": {"kinds": {"mp": -1}}}}, "simulation.jitter.noise.nic.kinds.mp"),
    ({"noise": {"nic": {"kinds": {"tp": 0.1}}}}, "simulation.jitter.noise.nic.kinds.tp"),
    ({"noise": {"infiniband": {"sigma": 0.1}}}, "simulation.jitter.noise.infiniband"),
    ({"congestion": {"pcie": {"bandwidth_factor": 0.5, "mean_on_s": 1, "mean_off_s": 1}}},
     "simulation.jitter.congestion.pcie"),
    ({"compute": {"stragglers": {"probability": 1.5, "slowdown": 2}}},
     "simulation.jitter.compute.stragglers.probability"),
    ({"compute": {"stragglers": {"probability": -0.1}}}, "simulation.jitter.compute.stragglers.probability"),
    ({"compute": {"stragglers": {"probability": 0.1, "slowdown": 0.5}}},
     "simulation.jitter.compute.stragglers.slowdown"),
    ({"congestion": {"nic": {"bandwidth_factor": 0, "mean_on_s": 1, "mean_off_s": 1}}},
     "simulation.jitter.congestion.nic.bandwidth_factor"),
    ({"congestion": {"nic": {"bandwidth_factor": 0.5, "mean_on_s": 0, "mean_off_s": 1}}},
     "simulation.jitter.congestion.nic.mean_on_s"),
    ({"congestion": {"nic": {"bandwidth_factor": 0.5, "mean_on_s": 1}}}, "simulation.jitter.congestion.nic.mean_off_s"),
    ({"congestion": {"nic": {"bandwidth_factor": 0.5, "mean_on_s": 1, "mean_off_s": 1, "scope": "rack"}}},
     "simulation.jitter.congestion.nic.scope"),
    ({"congestion": {"nic": {"bandwidth_factor": 1, "mean_on_s": 1, "mean_off_s": 1, "scope": "tier",
                             "latency_s": -1e-4}}}, "simulation.jitter.congestion.nic.latency_s"),
    ({"congestion": {"nic": {"bandwidth_factor": 1, "mean_on_s": 1, "mean_off_s": 1, "latency_s": 1e-4}}},
     "simulation.jitter.congestion.nic.latency_s"),  # per link: the engine cannot tell which link
    ({"sigma": 0.1}, "simulation.jitter.sigma"),
    ({"preset": "frontier"}, "simulation.jitter.preset"),
    ({"noise": {"nic": {"sigma": "high"}}}, "simulation.jitter.noise.nic.sigma"),
    ({"noise": {"nic": {"sigma": 0.1, "message_bytes": 0}}}, "simulation.jitter.noise.nic.message_bytes"),
    ({"compute": {"iteration_sigma": -0.01}}, "simulation.jitter.compute.iteration_sigma"),
    ({"compute": {"iteration_sigma": "fast"}}, "simulation.jitter.compute.iteration_sigma"),
])
def test_bad_parameters_name_the_key(mapping, field):
    with pytest.raises(ConfigError) as e:
        parse_jitter(mapping)
    assert e.value.field == field


def test_set_override_reaches_the_jitter(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(tiny_mapping()))
    sc = load_scenario(str(path), ["simulation.jitter.preset=vista", "simulation.jitter.noise.nic.sigma=0.7"])
    j = parse_jitter(sc.simulation.jitter)
    assert next(t for t in j.noise if t.tier == "nic").sigma == 0.7
    with pytest.raises(ConfigError, match="simulation.jitter.noise.nic.sigma"):  # refused when loaded
        load_scenario(str(path), ["simulation.jitter.noise.nic.sigma=-1"])


# -- the models on their own -----------------------------------------------------------------------------


def test_lognormal_factor_is_mean_preserving():
    # E[exp(N(-s^2/2, s))] = 1; the standard error of the mean of N factors is sqrt(exp(s^2) - 1) / sqrt(N).
    s, n = 0.5, 20000
    j = parse_jitter({"noise": {"nic": {"sigma": s}}})
    rng = np.random.default_rng(3)
    f = np.array([j.comm_factor("mp", "nic", rng) for _ in range(n)])
    se = math.sqrt(math.exp(s * s) - 1) / math.sqrt(n)
    assert abs(f.mean() - 1) < 4 * se
    assert abs(np.log(f).std() - s) < 0.02  # it is lognormal with the configured sigma
    assert j.comm_factor("mp", "nvlink", rng) == 1.0  # tier without noise: exactly 1, no draw


def test_a_transfer_averages_the_noise_of_its_messages():
    # n messages with iid mean-1 lognormal(s) factors: their mean has mean 1 and variance (exp(s^2) - 1) / n;
    # the one draw per transfer is a lognormal with exactly that mean and variance
    s, msg = 0.5, 1000.0
    for nbytes, n in ((0.0, 1), (1000.0, 1), (1001.0, 2), (64_000.0, 64), (1e9, 1_000_000)):
        sn = transfer_sigma(s, nbytes, msg)
        assert math.isclose(math.expm1(sn * sn), math.expm1(s * s) / n, rel_tol=1e-12)
    j = parse_jitter({"noise": {"nic": {"sigma": s, "message_bytes": msg}}})
    run = j.bind(np.random.default_rng(4))
    n_draws, var = 20000, math.expm1(s * s) / 64
    f = np.array([run.comm_factor("dp_allreduce", "nic", 64_000.0) for _ in range(n_draws)])
    assert abs(f.mean() - 1) < 4 * math.sqrt(var / n_draws)
    assert abs(f.var() / var - 1) < 0.06  # the sample variance's relative sd here is ~1.5 %
    # the explicit mean of 64 per-message factors agrees in spread (what the one draw stands for)
    g = np.random.default_rng(5)
    means = np.exp(s * g.standard_normal((4000, 64)) - s * s / 2).mean(axis=1)
    assert abs(means.var() / var - 1) < 0.1
    assert j.to_mapping()["noise"]["nic"]["message_bytes"] == msg  # a non-default size survives the round trip


def test_large_transfers_average_their_noise_in_a_run():
    # the same per-message sigma, once with NCCL's 512 KiB messages (the MP all-reduces of the tiny
    # model are a few MiB: several messages each) and once with every transfer one message
    sc, costs = tiny(pp=2, mp=2, dp=2)
    cv_msgs, _ = _cv(sc, costs, parse_jitter({"noise": {"nic": {"sigma": 0.3}}}))
    cv_whole, _ = _cv(sc, costs, parse_jitter({"noise": {"nic": {"sigma": 0.3, "message_bytes": 1e15}}}))
    assert 0 < cv_msgs < 0.5 * cv_whole  # measured 0.0031 vs 0.031: the steps merge many all-reduces


def test_heavy_tail_adds_rare_large_factors():
    # probability p per message of a Pareto(alpha) factor >= 1: P(factor > x) = p x^-alpha for x >= 1
    p, alpha, n = 0.05, 2.0, 40000
    j = parse_jitter({"noise": {"nic": {"tail": {"probability": p, "alpha": alpha}}}})
    rng = np.random.default_rng(5)
    f = np.array([j.comm_factor("mp", "nic", rng) for _ in range(n)])
    assert f.min() == 1.0
    assert abs((f > 1).mean() - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert abs((f > 2).mean() - p * 2 ** -alpha) < 4 * math.sqrt(p / 4 / n)
    # in a run the tail has its own stream: switching it on leaves the lognormal body's draws as they were
    body = parse_jitter({"noise": {"nic": {"sigma": 0.2}}})
    both = parse_jitter({"noise": {"nic": {"sigma": 0.2, "tail": {"probability": p, "alpha": alpha}}}})
    a, b = body.bind(np.random.default_rng(9)), both.bind(np.random.default_rng(9))
    fa = np.array([a.comm_factor("mp", "nic") for _ in range(2000)])
    fb = np.array([b.comm_factor("mp", "nic") for _ in range(2000)])
    assert np.all(fb >= fa * (1 - 1e-12)) and 0 < np.mean(fb > fa * (1 + 1e-9)) < 3 * p
    with pytest.raises(ConfigError, match="tail.alpha"):
        parse_jitter({"noise": {"nic": {"tail": {"probability": 0.1, "alpha": 1.0}}}})


def test_shipped_presets_are_fitted_and_vista_is_an_alias():
    from trainsim.sim.jitter_presets import FITTED_PRESETS, PRESET_ALIASES

    assert {"vista-quiet", "vista-busy", "perlmutter"} <= set(FITTED_PRESETS)
    assert PRESET_ALIASES["vista"] in FITTED_PRESETS
    for name, p in FITTED_PRESETS.items():
        assert p["command"].startswith("trainsim jitter fit") and parse_jitter(p["jitter"]) is not None, name
    assert parse_jitter({"preset": "vista"}).to_mapping() == parse_jitter({"preset": "vista-busy"}).to_mapping()


def test_stragglers_once_per_rank_per_run():
    j = parse_jitter({"compute": {"stragglers": {"probability": 0.25, "slowdown": 2.0}}})
    slow = 0
    runs = 400
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        first = [j.compute_factor(s, r, rng) for s in range(2) for r in range(2)]
        assert first == [j.compute_factor(s, r, rng) for s in range(2) for r in range(2)]  # fixed within a run
        assert set(first) <= {1.0, 2.0}
        slow += first.count(2.0)
    # Binomial(1600, 0.25): mean 400, sd ~17.3
    assert abs(slow - 400) < 4 * math.sqrt(1600 * 0.25 * 0.75)


def test_gpu_speed_once_per_rank_per_run_and_the_group_waits_for_its_slowest_gpu():
    from trainsim.sim.jitter import RunJitter
    from trainsim.sim.streams import RunStreams

    sigma = 0.05
    j = parse_jitter({"compute": {"iteration_sigma": sigma}})
    assert j.sources() == ("compute",) and j.to_mapping()["compute"]["iteration_sigma"] == sigma
    assert parse_jitter(j.to_mapping()) == j
    means = {}
    for lockstep in (1, 8):
        factors = []
        for seed in range(300):
            run = j.bind(np.random.default_rng(seed), lockstep)
            first = [run.compute_factor(s, r) for s in range(2) for r in range(2)]
            assert first == [run.compute_factor(s, r) for s in range(2) for r in range(2)]  # fixed within a run
            assert len(set(first)) == 4  # each (stage, replica) its own draw
            # the factor is the lognormal of the largest of the group's standard normals, from the
            # (stage, replica)'s own stream (the same numbers whatever the order of first use)
            z = RunStreams(np.random.default_rng(seed)).child(("speed", 1, 0)).standard_normal(lockstep).max()
            assert first[2] == pytest.approx(math.exp(sigma * z - 0.5 * sigma * sigma), rel=1e-12)
            assert RunJitter(j, RunStreams(np.random.default_rng(seed)), lockstep).compute_factor(1, 0) == first[2]
            factors += first
        means[lockstep] = float(np.mean(factors))
    # one GPU: mean 1 (sd of the mean of 1,200 draws ~0.0014); eight in lockstep wait for the slowest:
    # E[max of 8 standard normals] = 1.4236, so the mean factor is ~exp(0.05 * 1.4236 - 0.00125) = 1.0725
    assert abs(means[1] - 1.0) < 0.006
    assert means[8] == pytest.approx(math.exp(sigma * 1.4236 - 0.5 * sigma * sigma), abs=0.006)


def test_gpu_speed_scales_a_compute_only_iteration_by_its_slowest_rank():
    # One stage, one replica, one GPU (no communication at all): the jittered iteration is the
    # deterministic one times that rank's speed factor of the run, exactly.
    sc, costs = tiny(pp=1, mp=1, dp=1)
    det = simulate(costs, sc.cluster).iteration_s
    j = parse_jitter({"compute": {"iteration_sigma": 0.03}})
    for seed in range(3):
        t = simulate(costs, sc.cluster, seed=seed, perturb=j).iteration_s
        factor = j.bind(np.random.default_rng(seed)).compute_factor(0, 0)
        assert factor != 1.0 and t == pytest.approx(det * factor, rel=1e-9)
    # a tensor-parallel pair waits for the slower of its two GPUs: slower on average than one GPU's draw
    sc2, costs2 = tiny(pp=1, mp=2, dp=1)
    det2 = simulate(costs2, sc2.cluster).iteration_s
    ratio = [simulate(costs2, sc2.cluster, seed=s, perturb=j).iteration_s / det2 for s in range(40)]
    assert np.mean(ratio) > 1.0 + 0.03 * 0.3  # E[max of 2 normals] = 0.564: about +1.7 %, well above +0.9 %


class FakeNetwork:
    def __init__(self, caps):
        self.nominal = dict(caps)
        self.capacity = dict(caps)
        self.log = []

    def set_capacities(self, changes):
        for link, value in changes.items():
            self.capacity[link] = value
            self.log.append((link, value))


def test_congestion_process_duty_cycle_and_levels():
    env = simpy.Environment()
    net = FakeNetwork({"nic:0.0": 100.0, "nic:1.0": 100.0, "nvlink:0": 50.0})
    j = parse_jitter({"congestion": {"nic": {"bandwidth_factor": 0.25, "mean_on_s": 1.0, "mean_off_s": 3.0}}})
    procs = j.processes(env, net, np.random.default_rng(0))
    assert len(procs) == 2  # one per NIC link, none for NVLink
    on_time = {"nic:0.0": 0.0}
    state = {"t": 0.0, "cap": 100.0}

    def watch(changes):
        for link, value in changes.items():
            if link == "nic:0.0":
                if state["cap"] < 100:
                    on_time[link] += env.now - state["t"]
                state["t"], state["cap"] = env.now, value
            net.capacity[link] = value

    net.set_capacities = watch
    procs = j.processes(env, net, np.random.default_rng(0))
    for p in procs:
        env.process(p)
    horizon = 20000.0
    env.run(until=horizon)
    if state["cap"] < 100:
        on_time["nic:0.0"] += horizon - state["t"]
    assert set(net.capacity.values()) <= {100.0, 25.0, 50.0}
    # ~5000 on/off cycles: the on fraction is 0.25 within a few percent
    assert abs(on_time["nic:0.0"] / horizon - 0.25) < 0.02


def test_tier_scope_switches_all_links_together():
    env = simpy.Environment()
    net = FakeNetwork({f"nic:{i}.0": 10.0 for i in range(4)})
    j = parse_jitter({"congestion": {"nic": {"bandwidth_factor": 0.5, "mean_on_s": 1, "mean_off_s": 1,
                                             "scope": "tier"}}})
    procs = j.processes(env, net, np.random.default_rng(1))
    assert len(procs) == 1
    env.process(procs[0])
    env.run(until=50)
    values = [v for _, v in net.log]
    assert len(values) % 4 == 0 and values
    for k in range(0, len(values), 4):
        assert len(set(values[k:k + 4])) == 1
    # a direct call: the generator sets the links and yields timeouts
    gen = congestion_process(env, net.set_capacities, ["nic:0.0"], net.nominal, j.congestion[0],
                             np.random.default_rng(2))
    assert isinstance(next(gen), simpy.events.Timeout)


# -- Monte Carlo with the engine --------------------------------------------------------------------------


def test_jitter_off_every_sample_is_the_deterministic_simulation():
    sc, costs = tiny()
    det = simulate(costs, sc.cluster).iteration_s
    res = run_monte_carlo(costs, sc.cluster, None, 6, seed=5)
    assert np.all(res.samples_s == det) and res.deterministic_s == det
    assert res.avg_over_min_pct == 0.0 and res.per_kind_share == {}


def test_seeded_determinism_and_different_seeds_differ():
    sc, costs = tiny()
    j = parse_jitter(NOISY)
    a = run_monte_carlo(costs, sc.cluster, j, 16, seed=1, share_samples=0)
    b = run_monte_carlo(costs, sc.cluster, j, 16, seed=1, share_samples=0)
    c = run_monte_carlo(costs, sc.cluster, j, 16, seed=2, share_samples=0)
    assert a.samples_s.tobytes() == b.samples_s.tobytes()
    assert not np.array_equal(a.samples_s, c.samples_s)
    assert len(set(a.samples_s.tolist())) > 10
    # a sample depends on (seed, index) only: the first 8 of 16 equal a run of 8
    d = run_monte_carlo(costs, sc.cluster, j, 8, seed=1, share_samples=0)
    assert d.samples_s.tobytes() == a.samples_s[:8].tobytes()
    assert child_seeds(1, 3) == [int(np.random.SeedSequence(1).spawn(3)[i].generate_state(1, np.uint64)[0])
                                 for i in range(3)]


def test_same_samples_whatever_jobs():
    sc, costs = tiny()
    j = parse_jitter(NOISY)
    a = run_monte_carlo(costs, sc.cluster, j, 24, seed=9, jobs=1, share_samples=8)
    b = run_monte_carlo(costs, sc.cluster, j, 24, seed=9, jobs=2, share_samples=8)
    assert a.samples_s.tobytes() == b.samples_s.tobytes()
    assert a.per_kind_share == b.per_kind_share


def test_dask_backend_matches_joblib():
    distributed = pytest.importorskip("distributed")
    sc, costs = tiny()
    j = parse_jitter(NOISY)
    ref = run_monte_carlo(costs, sc.cluster, j, 12, seed=4, share_samples=0)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        res = run_monte_carlo(costs, sc.cluster, j, 12, seed=4, backend="dask", scheduler=lc.scheduler_address,
                              share_samples=0)
    assert res.samples_s.tobytes() == ref.samples_s.tobytes()


def test_mean_preserving_noise_keeps_a_lone_transfers_mean():
    # One stage, one replica, MP over two Vista nodes: the iteration is compute plus a chain of MP
    # transfers, each alone on its links, so E[iteration] = deterministic when only MP noise is on.
    sc, costs = tiny(pp=1, mp=2, dp=1, m=1)
    s, n = 0.4, 800
    j = parse_jitter({"noise": {"nic": {"sigma": s}}})
    res = run_monte_carlo(costs, sc.cluster, j, n, seed=11, share_samples=0)
    det = res.deterministic_s
    comm = costs.stages[0].mp_fwd_s + costs.stages[0].mp_bwd_s
    assert comm > 0.2 * det  # the noise has something to act on
    # Each step's MP transfer gets its own factor; the sd of a sum is below the sum of sds,
    # so comm * sqrt(exp(s^2) - 1) / sqrt(n) bounds the standard error of the mean.
    se = comm * math.sqrt(math.exp(s * s) - 1) / math.sqrt(n)
    assert abs(res.mean_s - det) < 4 * se
    assert res.samples_s.std() > 0


def _cv(sc, costs, jitter, n=60):
    res = run_monte_carlo(costs, sc.cluster, jitter, n, seed=21, share_samples=0)
    return res.samples_s.std() / res.samples_s.mean(), res


def test_more_gpus_on_the_network_more_variance():
    j = parse_jitter({"noise": {"nic": {"sigma": 0.2}},
                      "congestion": {"nic": {"bandwidth_factor": 0.3, "mean_on_s": 0.005, "mean_off_s": 0.05}}})
    small, costs_s = tiny(pp=2, mp=2, dp=1)
    large, costs_l = tiny(pp=2, mp=2, dp=8)
    _, rs = _cv(small, costs_s, j)
    _, rl = _cv(large, costs_l, j)
    # more NICs that can be congested and more replicas to wait for: a larger slowdown and spread
    assert rl.mean_s / rl.deterministic_s > rs.mean_s / rs.deterministic_s
    assert rl.avg_over_min_pct > rs.avg_over_min_pct


def test_inter_node_mp_traffic_gives_more_variance():
    j = parse_jitter({"noise": {"nic": {"sigma": 0.3}}})
    intra, c_intra = tiny(cluster="perlmutter", pp=2, mp=4, dp=2)  # MP groups inside a 4-GPU node
    inter, c_inter = tiny(cluster="perlmutter", pp=2, mp=8, dp=1)  # MP groups span two nodes
    cv_intra, _ = _cv(intra, c_intra, j)
    cv_inter, _ = _cv(inter, c_inter, j)
    assert cv_inter > 1.3 * cv_intra  # measured 0.070 vs 0.044 at seed 21


def test_shares_by_ablation_add_up_with_the_residual():
    sc, costs = tiny(dp=4)
    j = parse_jitter({"preset": "vista", "congestion": {"nic": {"mean_on_s": 0.02, "mean_off_s": 0.05}},
                      "noise": {"nic": {"tail": {"probability": 0.01, "alpha": 2.5}}},
                      "compute": {"sigma": 0.01, "stragglers": {"probability": 0.1, "slowdown": 1.1}}})
    res = run_monte_carlo(costs, sc.cluster, j, 40, seed=3, share_samples=20)
    assert set(res.per_kind_share) == set(j.sources()) == {"mp", "pp", "dp", "tail", "compute", "congestion"}
    assert sum(res.per_kind_share.values()) + res.share_residual == pytest.approx(1.0)
    assert res.added_s["all"] > 0
    assert res.per_kind_share["congestion"] > res.per_kind_share["pp"]


# -- the CLI ----------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_mapping()))
    return path


def test_cli_json_and_plot(tiny_file, tmp_path, capsys):
    png = tmp_path / "h.png"
    rc = main(["jitter", str(tiny_file), "-n", "30", "--seed", "3", "--json", "--plot", str(png),
               "--set", "simulation.jitter.preset=vista", "--shares", "10"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("samples_s", "min_s", "mean_s", "p50_s", "p95_s", "max_s", "avg_over_min_pct", "shares"):
        assert key in out
    assert len(out["samples_s"]) == 30 and out["jitter_configured"] is True
    assert out["min_s"] <= out["p50_s"] <= out["p95_s"] <= out["max_s"]
    assert out["avg_over_min_pct"] == pytest.approx(100 * (out["mean_s"] / out["min_s"] - 1))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_runs_n_simulations_and_measures_the_shares_only_when_asked(tiny_file, capsys):
    from trainsim.scenarios.montecarlo import monte_carlo_total

    j = parse_jitter({"preset": "vista"})
    assert monte_carlo_total(j, 30) == 30 and monte_carlo_total(j, 30, 10) == 30 + 10 * len(j.sources())
    assert main(["jitter", str(tiny_file), "-n", "12", "--set", "simulation.jitter.preset=vista"]) == 0
    out = capsys.readouterr().out
    assert "--shares K re-runs K seeds" in out and "where the added time comes from (" not in out
    assert main(["jitter", str(tiny_file), "-n", "12", "--set", "simulation.jitter.preset=vista", "--shares", "6"]) == 0
    out = capsys.readouterr().out
    assert "first 6 seeds" in out and "--shares K" not in out


def test_cli_without_jitter_says_so(tiny_file, capsys):
    assert main(["jitter", str(tiny_file), "-n", "3"]) == 0
    assert "no jitter configured" in capsys.readouterr().out


def test_cli_bad_output_path_fails_before_work(tiny_file, tmp_path, capsys):
    assert main(["jitter", str(tiny_file), "-n", "3", "--plot", str(tmp_path / "nope" / "h.png")]) == 2
    assert "--plot" in capsys.readouterr().err


def test_cli_bad_jitter_is_one_line(tiny_file, capsys):
    assert main(["jitter", str(tiny_file), "-n", "3", "--set", "simulation.jitter.noise.nic.sigma=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "simulation.jitter.noise.nic.sigma" in err


# -- the fit ------------------------------------------------------------------------------------------------


def test_read_times_header_optional_and_bad_lines(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("iteration_s\n" + "\n".join(str(1 + i / 100) for i in range(25)) + "\n")
    assert read_times(str(good)).size == 25
    bad = tmp_path / "b.csv"
    bad.write_text("1.0\n" * 5 + "oops\n" + "1.0\n" * 20)
    with pytest.raises(ConfigError) as e:
        read_times(str(bad))
    assert e.value.field == f"{bad}:6"
    neg = tmp_path / "n.csv"
    neg.write_text("1.0\n-2\n")
    with pytest.raises(ConfigError, match=":2"):
        read_times(str(neg))


def test_cli_fit_bad_file(tiny_file, tmp_path, capsys):
    bad = tmp_path / "b.csv"
    bad.write_text("1,2\n")
    assert main(["jitter", "fit", str(bad), str(tiny_file)]) == 2
    assert f"{bad}:1" in capsys.readouterr().err


# The joint fit's recovery test is in tests/test_jitter_fit.py (the former two-parameter fit,
# kept for the Python API, is exercised by tests/test_progress.py).


# -- properties --------------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(sigma=st.floats(-1, 4, allow_nan=False), p=st.floats(-0.5, 1.5, allow_nan=False),
       bf=st.floats(-0.5, 1.5, allow_nan=False), on=st.floats(-1, 10, allow_nan=False))
def test_validation_accepts_exactly_the_documented_ranges(sigma, p, bf, on):
    mapping = {"noise": {"nic": {"sigma": sigma}},
               "congestion": {"nic": {"bandwidth_factor": bf, "mean_on_s": on, "mean_off_s": 1.0}},
               "compute": {"stragglers": {"probability": p, "slowdown": 1.5}}}
    ok = 0 <= sigma <= 3 and 0 <= p <= 1 and 0 < bf <= 1 and on > 0
    if not ok:
        with pytest.raises(ConfigError):
            parse_jitter(mapping)
        return
    j = parse_jitter(mapping)
    if j is not None:
        assert parse_jitter(j.to_mapping()) == j
        rng = np.random.default_rng(0)
        f = j.comm_factor("pp", "nic", rng)
        assert f > 0 and math.isfinite(f)
        assert j.compute_factor(0, 0, rng) in (1.0, 1.5)


def test_step_latency_delays_each_ring_step_and_grows_with_the_mp_degree():
    # an episode that never ends, bandwidth untouched: every MP all-reduce of a step waits 2 (mp - 1)
    # ring steps of L, every P2P send one. With one replica and one stage, nothing overlaps: the
    # iteration grows by exactly (forward + backward MP syncs) x micro-batches x 2 (mp - 1) x L.
    from trainsim.sim.engine import simulate

    latency = 1e-4
    always = {"congestion": {"nic": {"bandwidth_factor": 1.0, "mean_on_s": 1e12, "mean_off_s": 1e-12,
                                     "scope": "tier", "latency_s": latency}}}
    added = {}
    for mp in (2, 4):
        sc, costs = tiny(pp=1, mp=mp, dp=1)
        st = costs.stages[0]
        base = simulate(costs, sc.cluster, seed=0).iteration_s
        late = simulate(costs, sc.cluster, perturb=parse_jitter(always), seed=0).iteration_s
        m = sc.training.micro_batches
        assert late - base == pytest.approx((st.mp_fwd_count + st.mp_bwd_count) * m * 2 * (mp - 1) * latency,
                                            rel=1e-9)
        added[mp] = late - base
    assert added[4] > added[2] > 0
    # latency 0 leaves the run as it was, to the bit
    sc, costs = tiny()
    off = dict(always["congestion"]["nic"], latency_s=0.0)
    a = simulate(costs, sc.cluster, perturb=parse_jitter({"noise": {"nic": {"sigma": 0.3}}}), seed=3).iteration_s
    b = simulate(costs, sc.cluster, perturb=parse_jitter({"noise": {"nic": {"sigma": 0.3}},
                                                          "congestion": {"nic": off}}), seed=3).iteration_s
    assert a == b
