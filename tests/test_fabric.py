"""The fabric beyond the NICs (topology.fabric): parsing, hand-computed leaf/spine uplink loads and
capacities, max-min sharing of an oversubscribed uplink, and full bisection left exactly as it was.

Every number below is worked out by hand from the ring derivation in topology/graph.py's module
doc: a ring all-reduce over ``n`` nodes with ``c`` group GPUs per node puts ``2(n-1)/(n c)`` bytes
per byte of message on each ring edge, per direction; all-gather ``n - 1``.
"""

from __future__ import annotations

import dataclasses

import pytest
import simpy

from trainsim.operators import CollKind, Parallelism
from trainsim.operators.errors import ConfigError
from trainsim.scenarios.cli import main
from trainsim.sim.network import Network, max_min_shares
from trainsim.sim.routes import _member_rates
from trainsim.topology import LinkId, LinkModel, LinkTier, Placement, build_graph, cluster_from_mapping, get_cluster
from trainsim.topology.fabric import FULL_BISECTION, FabricKind, FabricSpec, fabric_from_mapping

NIC = 50e9  # 400 Gb/s


def cluster(gpus_per_node: int = 2, nics_per_node: int = 2, **fabric: object):
    """A custom cluster of H100s, 400 Gb/s NICs, with the fabric given (full bisection without one)."""
    d: dict[str, object] = {"gpu": "h100-sxm", "gpus_per_node": gpus_per_node, "nics_per_node": nics_per_node,
                            "nic_gbps": 400, "nvlink_gbps": 450}
    if fabric:
        d["fabric"] = fabric
    return cluster_from_mapping(d)


def model(cl, pp: int, mp: int, dp: int) -> tuple[LinkModel, Placement]:
    pl = Placement(Parallelism(pp=pp, mp=mp, dp=dp), cl.gpus_per_node)
    return LinkModel(cl, pl), pl


def fabric_loads(loads: dict[LinkId, float]) -> dict[str, float]:
    return {str(e): w for e, w in loads.items() if e.tier in (LinkTier.LEAF, LinkTier.SPINE)}


# -- parsing and validation ------------------------------------------------------------------------------

def test_full_bisection_is_the_default_everywhere():
    for name in ("perlmutter", "vista", "dgx-h100", "dgx-h200", "dgx-a100", "hgx-h100", "hgx-h200", "h100-sxm"):
        assert get_cluster(name).fabric == FULL_BISECTION
    assert cluster().fabric is FULL_BISECTION
    assert not FULL_BISECTION.has_links


def test_parse_a_fat_tree():
    cl = cluster(kind="fat_tree", nodes_per_leaf=16, oversubscription=2)
    assert cl.fabric == FabricSpec(kind=FabricKind.FAT_TREE, nodes_per_leaf=16, oversubscription=2.0)
    assert cl.fabric.describe() == "2-level fat tree, 16 nodes/leaf, node-per-leaf, 2:1"
    three = fabric_from_mapping({"kind": "fat_tree", "levels": 3, "nodes_per_leaf": 4, "nodes_per_pod": 16,
                                 "spine_oversubscription": 2, "rail_optimized": True})
    assert three.levels == 3 and three.pod(15) == 0 and three.pod(16) == 1 and three.leaf(5, 3) == (1, 3)
    # A preset's fabric is the base: keys not given keep it; another kind starts from the defaults.
    base = FabricSpec(kind=FabricKind.FAT_TREE, nodes_per_leaf=32, rail_optimized=True)
    assert fabric_from_mapping({"oversubscription": 4}, base) == dataclasses.replace(base, oversubscription=4.0)
    assert fabric_from_mapping({"kind": "full_bisection"}, base) == FULL_BISECTION
    assert fabric_from_mapping("full_bisection") == FULL_BISECTION
    sc = cluster_from_mapping({"preset": "dgx-h100", "fabric": {"kind": "fat_tree", "nodes_per_leaf": 32,
                                                                "rail_optimized": True}})
    assert sc.fabric.rail_optimized and sc.nic_bw == get_cluster("dgx-h100").nic_bw


@pytest.mark.parametrize("fabric, field", [
    ({"kind": "dragonfly"}, "cluster.fabric.kind"),
    ({"kind": 3}, "cluster.fabric.kind"),
    ({"kind": "fat_tree"}, "cluster.fabric.nodes_per_leaf"),
    ({"kind": "fat_tree", "nodes_per_leaf": 0}, "cluster.fabric.nodes_per_leaf"),
    ({"kind": "fat_tree", "nodes_per_leaf": 2.5}, "cluster.fabric.nodes_per_leaf"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "oversubscription": 0.5}, "cluster.fabric.oversubscription"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "oversubscription": float("nan")}, "cluster.fabric.oversubscription"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "oversubscription": "2:1"}, "cluster.fabric.oversubscription"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "rail_optimized": "yes"}, "cluster.fabric.rail_optimized"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "levels": 4}, "cluster.fabric.levels"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "levels": 3}, "cluster.fabric.nodes_per_pod"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "levels": 3, "nodes_per_pod": 6}, "cluster.fabric.nodes_per_pod"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "levels": 3, "nodes_per_pod": 4}, "cluster.fabric.nodes_per_pod"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "nodes_per_pod": 8}, "cluster.fabric.nodes_per_pod"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "spine_oversubscription": 2}, "cluster.fabric.spine_oversubscription"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "levels": 3, "nodes_per_pod": 8, "spine_oversubscription": 0},
     "cluster.fabric.spine_oversubscription"),
    ({"kind": "full_bisection", "oversubscription": 2}, "cluster.fabric.oversubscription"),
    ({"kind": "full_bisection", "nodes_per_leaf": 4}, "cluster.fabric.nodes_per_leaf"),
    ({"kind": "fat_tree", "nodes_per_leaf": 4, "leaf_radix": 64}, "cluster.fabric.leaf_radix"),
    ([1, 2], "cluster.fabric"),
])
def test_bad_fabric_names_the_field(fabric, field):
    with pytest.raises(ConfigError) as e:
        cluster_from_mapping({"preset": "dgx-h100", "fabric": fabric})
    assert e.value.field == field


@pytest.mark.parametrize("override, needle", [
    ("cluster.fabric.kind=fat_tree", "cluster.fabric.nodes_per_leaf"),
    ("cluster.fabric={kind: fat_tree, nodes_per_leaf: 4, oversubscription: 0.5}", "cluster.fabric.oversubscription"),
    ("cluster.fabric.kind=torus", "cluster.fabric.kind"),
])
def test_bad_fabric_on_the_command_line_is_one_line_exit_2(override, needle, capsys):
    rc = main(["predict", "gpt20b-dgxh100", "--set", "profile.name=roofline", "--set", override])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("trainsim: error: ") and err.count("\n") == 1 and needle in err, err


# -- capacities and hand-computed loads -------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [1.0, 2.0, 4.0])
def test_uplink_capacities(ratio):
    # 4 nodes per leaf of 2 NICs: a node-per-leaf uplink carries 8 NICs' line rate over the ratio,
    # a rail-optimised leaf (one rail of 4 nodes) 4 NICs'.
    lm, _ = model(cluster(kind="fat_tree", nodes_per_leaf=4, oversubscription=ratio), 1, 2, 8)
    assert fabric_loads({e: 1.0 for e in lm.capacities}) == {"leaf:0": 1.0, "leaf:1": 1.0}
    assert lm.capacities[LinkId.leaf(0, -1)] == 8 * NIC / ratio
    lm, _ = model(cluster(kind="fat_tree", nodes_per_leaf=4, oversubscription=ratio, rail_optimized=True), 1, 2, 8)
    assert sorted(fabric_loads({e: 1.0 for e in lm.capacities})) == ["leaf:0.0", "leaf:0.1", "leaf:1.0", "leaf:1.1"]
    assert lm.capacities[LinkId.leaf(1, 1)] == 4 * NIC / ratio


@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_dp_ring_across_two_leaves(ratio):
    # PP1 MP2 DP8 on 8 nodes of 2 GPUs, 4 nodes per leaf. MP rank 0's DP ring: GPU 0 of nodes 0..7,
    # all-reduce over n = 8 nodes, c = 1: every edge 2*7/8 = 1.75. It leaves leaf 0 once (node 3 -> 4)
    # and leaf 1 once (7 -> 0): 1.75 on each uplink, whatever the ratio (the ratio is in the capacity).
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=4, oversubscription=ratio), 1, 2, 8)
    loads = lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))
    assert fabric_loads(loads) == {"leaf:0": 1.75, "leaf:1": 1.75}
    assert loads[LinkId.nic(0, 0)] == 1.75  # as much as one NIC
    assert fabric_loads(lm.loads(CollKind.ALL_GATHER, pl.dp_group(0, 1))) == {"leaf:0": 7.0, "leaf:1": 7.0}
    # Rail-optimised: MP rank 1's ring stays on rail 1 (NIC 1 of every node) and loads its leaves only.
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=4, oversubscription=ratio, rail_optimized=True), 1, 2, 8)
    assert fabric_loads(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 1))) == {"leaf:0.1": 1.75, "leaf:1.1": 1.75}
    # Uncontended: the NIC (1.75 B/B at 50 GB/s) is the bottleneck at 1:1; at 2:1 the rail leaf
    # uplink has 4 * 50 / 2 = 100 GB/s for 1.75 B/B, still wider than the NIC.
    ranks = pl.dp_group(0, 1)
    t_nic = 1.75 * 1e9 / NIC
    assert lm.uncontended_seconds(CollKind.ALL_REDUCE, ranks, 1e9) == pytest.approx(
        2 * 7 * lm.cluster.inter_latency_s + t_nic, rel=1e-12)


def test_ring_inside_one_leaf_leaves_nothing_above_it():
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=4, oversubscription=4), 2, 2, 4)
    assert fabric_loads(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))) == {}  # nodes 0..3
    assert fabric_loads(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(1, 1))) == {}  # nodes 4..7


def test_two_gpus_per_node_in_the_ring():
    # PP1 MP1 DP8 on 4 nodes of 2 GPUs, 2 nodes per leaf: c = 2, n = 4; two rail rings (position 0
    # on NIC 0, position 1 on NIC 1), every edge 2*3/(4*2) = 0.75, each ring leaving each leaf once.
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=2), 1, 1, 8)
    loads = lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))
    assert fabric_loads(loads) == {"leaf:0": 1.5, "leaf:1": 1.5}
    assert loads[LinkId.nic(0, 0)] == 0.75 and loads[LinkId.nic(0, 1)] == 0.75
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=2, rail_optimized=True), 1, 1, 8)
    assert fabric_loads(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))) == {
        "leaf:0.0": 0.75, "leaf:1.0": 0.75, "leaf:0.1": 0.75, "leaf:1.1": 0.75}


def test_three_levels():
    # 8 nodes, 2 per leaf, 4 per pod: the ring 0..7 leaves every leaf once (1.75 each) and every pod
    # once (3 -> 4, 7 -> 0): 1.75 on both pod uplinks, of capacity 4 nodes * 2 NICs * 50 GB/s / (2 * 2).
    lm, pl = model(cluster(kind="fat_tree", levels=3, nodes_per_leaf=2, nodes_per_pod=4, oversubscription=2,
                           spine_oversubscription=2), 1, 2, 8)
    assert fabric_loads(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))) == {
        "leaf:0": 1.75, "leaf:1": 1.75, "leaf:2": 1.75, "leaf:3": 1.75, "spine:0": 1.75, "spine:1": 1.75}
    assert lm.capacities[LinkId.spine(1)] == 8 * NIC / 4
    assert lm.capacities[LinkId.leaf(3, -1)] == 4 * NIC / 2
    g = build_graph(lm.cluster, 8)
    assert g.edges["leafsw3", "pod1"]["link"] == LinkId.leaf(3, -1)
    assert g.edges["pod1", "fabric"]["capacity"] == 8 * NIC / 4


def test_p2p_across_leaves_and_rails():
    lm, _ = model(cluster(kind="fat_tree", nodes_per_leaf=4), 1, 2, 8)
    # GPU 0 (node 0) -> GPU 9 (node 4, local 1): both NICs, both leaf uplinks.
    assert lm.loads_p2p(0, 9) == {LinkId.nic(0, 0): 1.0, LinkId.nic(4, 1): 1.0,
                                  LinkId.leaf(0, -1): 1.0, LinkId.leaf(1, -1): 1.0}
    assert fabric_loads(lm.loads_p2p(0, 3)) == {}  # node 0 -> node 1: one leaf
    rail, _ = model(cluster(kind="fat_tree", nodes_per_leaf=4, rail_optimized=True), 1, 2, 8)
    # Same rail group, other rail: rail i's leaf to rail j's goes through the spine.
    assert fabric_loads(rail.loads_p2p(0, 3)) == {"leaf:0.0": 1.0, "leaf:0.1": 1.0}
    assert fabric_loads(rail.loads_p2p(0, 2)) == {}  # same rail, same group: below the spine
    assert LinkId.parse("leaf:0.1") == LinkId.leaf(0, 1) and LinkId.parse("spine:2").tier is LinkTier.SPINE
    assert LinkId.parse("leaf:7").node == 7


# -- sharing an uplink ---------------------------------------------------------------------------------

def test_max_min_shares_on_an_uplink():
    # Two rings each wanting 50 GB/s of a 50 GB/s uplink (and their own NICs): half each.
    # A third flow alone on a NIC of ring a: the NIC (50 GB/s) is shared first by a and c.
    up, na, nb = "leaf:0", "nic:0.0", "nic:0.1"
    caps = {up: 50.0, na: 50.0, nb: 50.0}
    assert max_min_shares({"a": {up: 50.0, na: 50.0}, "b": {up: 50.0, nb: 50.0}}, caps) == {"a": 0.5, "b": 0.5}
    # a and c on the NIC: 25 each at x = 0.5; b gets the uplink's rest, 25 of its 50: also 0.5 ...
    # with c only half as fast: a at 0.5 on the NIC (25 + 12.5 = 37.5 < 50) would let a rise;
    # progressive filling: x rises together; the uplink (100 x) saturates at 0.5, NIC (50x + 25x) at 2/3.
    assert max_min_shares({"a": {up: 50.0, na: 50.0}, "b": {up: 50.0, nb: 50.0}, "c": {na: 25.0}}, caps) == {
        "a": 0.5, "b": 0.5, "c": 1.0}


def test_uplink_rates_are_not_capped_but_follow_the_nics():
    lm, pl = model(cluster(kind="fat_tree", nodes_per_leaf=2, oversubscription=4), 1, 2, 8)
    loads = lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, 0))
    up = LinkId.leaf(0, -1)
    # A transfer twice as fast as its NIC allows: the NIC rate is capped at 50 GB/s, the uplink's
    # scaled by the same 1/2 (the bytes leave through the NICs), so 1.75 * 1e9 / (1.75/100 s) / 2 = 50 GB/s.
    rates = _member_rates(loads, 1e9, 1.75 * 1e9 / (2 * NIC), lm.capacities)
    assert rates[LinkId.nic(0, 0)] == NIC
    assert rates[up] == pytest.approx(NIC, rel=1e-15)
    # At the NIC's own speed: uplink rate 50 GB/s, its capacity 2 nodes * 2 NICs * 50 / 4 = 50 GB/s.
    rates = _member_rates(loads, 1e9, 1.75 * 1e9 / NIC, lm.capacities)
    assert rates[up] == pytest.approx(NIC, rel=1e-15) and lm.capacities[up] == NIC


@pytest.mark.parametrize("rail", [False, True])
def test_two_dp_rings_on_one_uplink_timeline(rail):
    # PP1 MP2 DP8 on 8 nodes of 2 GPUs, 2 nodes per leaf, 4:1. Node-per-leaf: both rings (rails 0
    # and 1) leave leaf 0 through one uplink of 2 * 2 * 50 / 4 = 50 GB/s, each at 1.75 B/B.
    # Rail-optimised: each ring has its own rail's leaf, of 2 * 50 / 4 = 25 GB/s.
    # Each ring alone runs at its NIC's speed: 1.75 * S / base = 50 GB/s on every link it loads.
    cl = cluster(kind="fat_tree", nodes_per_leaf=2, oversubscription=4, rail_optimized=rail)
    lm, pl = model(cl, 1, 2, 8)
    nbytes = 1e9
    base = 1.75 * nbytes / NIC  # 35 ms
    ring = [_member_rates(lm.loads(CollKind.ALL_REDUCE, pl.dp_group(0, i)), nbytes, base, lm.capacities)
            for i in range(2)]
    env = simpy.Environment()
    net = Network(env, lm.capacities)
    ends: dict[int, float] = {}

    def go(i: int, start: float):
        yield env.timeout(start)
        yield net.transfer_rates(base, ring[i], "dp_allreduce")
        ends[i] = env.now

    env.process(go(0, 0.0))
    env.process(go(1, base / 2))
    env.run()
    if not rail:
        # Ring 0 alone for base/2 (half done), then both at 50 / (50 + 50) = 1/2: ring 0's last half
        # takes base (ends 1.5 base); ring 1 has done base/2 by then and ends alone at 2 base.
        assert ends[0] == pytest.approx(1.5 * base, rel=1e-12)
        assert ends[1] == pytest.approx(2.0 * base, rel=1e-12)
    else:
        # Each ring alone on its rail's 25 GB/s uplink: x = 1/2, twice its base, however they overlap.
        assert ends[0] == pytest.approx(2.0 * base, rel=1e-12)
        assert ends[1] == pytest.approx(2.5 * base, rel=1e-12)
    # Full bisection: no uplink, each ring at its base.
    lm0, _ = model(cluster(), 1, 2, 8)
    assert not fabric_loads({e: 1.0 for e in lm0.capacities})


# -- full bisection and 1:1 give the answers of before -------------------------------------------------

def _simulate(sc_cluster, pp=4, mp=2, dp=8, m=8):
    from analytic_model import Analytic

    from trainsim.operators import ModelSpec, TrainingSpec, build_stage_plans
    from trainsim.sim.costs import build_costs
    from trainsim.sim.engine import simulate

    gpt = ModelSpec("gpt-test", hidden=4096, heads=32, layers=16, seq_len=2048, fwd_mp_syncs=1, bwd_mp_syncs=2)
    training = TrainingSpec(micro_batch=2, micro_batches=m, dp_bucket=100_000_000)
    par = Parallelism(pp=pp, mp=mp, dp=dp)
    costs = build_costs(build_stage_plans(gpt, training, par), training, par, sc_cluster, Analytic())
    return simulate(costs, sc_cluster)


def test_full_bisection_answers_are_unchanged_and_a_1_to_1_tree_gives_them_too():
    before = _simulate(get_cluster("perlmutter"))
    explicit = _simulate(cluster_from_mapping({"preset": "perlmutter", "fabric": {"kind": "full_bisection"}}))
    assert explicit.iteration_s == before.iteration_s and explicit.breakdown == before.breakdown
    for rail in (False, True):
        tree = _simulate(cluster_from_mapping({"preset": "perlmutter", "fabric": {
            "kind": "fat_tree", "nodes_per_leaf": 2, "oversubscription": 1, "rail_optimized": rail}}))
        assert tree.iteration_s == pytest.approx(before.iteration_s, rel=1e-9, abs=0)
        assert tree.bubble_share == pytest.approx(before.bubble_share, rel=1e-9, abs=1e-12)
    # 4:1 with 2 nodes per leaf: every stage boundary and every DP ring crosses leaves; it is slower.
    slow = _simulate(cluster_from_mapping({"preset": "perlmutter", "fabric": {
        "kind": "fat_tree", "nodes_per_leaf": 2, "oversubscription": 4}}))
    assert slow.iteration_s > before.iteration_s * 1.001
