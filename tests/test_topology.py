"""Topology: presets, placement hand-checks, closed-form collectives, graph and link model."""

import csv
import re
import statistics

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainsim.operators import Collective, CollKind, ConfigError, Parallelism
from trainsim.topology import (
    CLUSTER_PRESETS,
    GPU_PRESETS,
    ClusterSpec,
    LinkModel,
    Placement,
    build_graph,
    bus_bandwidth,
    closed_form_seconds,
    cluster_from_mapping,
    get_cluster,
)

PERL = get_cluster("perlmutter")
VISTA = get_cluster("vista")
DGX = get_cluster("dgx-h100")
AR, AG, RS, P2P = CollKind.ALL_REDUCE, CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.P2P


def place(pp, mp, dp, gpn):
    return Placement(Parallelism(pp=pp, mp=mp, dp=dp), gpn)


# ---------------------------------------------------------------- presets and the cluster section

def test_preset_figures():
    assert GPU_PRESETS["a100-sxm4-80gb"].peak_flops == 312e12
    assert GPU_PRESETS["h200"].mem_bw == 4.8e12
    assert PERL.gpus_per_node == 4 and PERL.nvlink_bw == 300e9 and PERL.nic_bw == 25e9 and PERL.nics_per_node == 4
    assert VISTA.gpus_per_node == 1 and VISTA.nvlink_bw == 0 and VISTA.nic_bw == 50e9
    assert DGX.nvlink_bw == 360e9 and DGX.nic_bw == 50e9 and DGX.nics_per_node == 8  # NVLink 4 as measured
    assert get_cluster("dgx-a100").nic_bw == 25e9
    assert get_cluster("h100-sxm").gpus_per_node == 1
    assert PERL.nic_bw_per_gpu == 25e9 and DGX.nic_bw_per_gpu == 50e9


def test_unknown_preset_names_field():
    with pytest.raises(ConfigError) as e:
        get_cluster("frontier")
    assert e.value.field == "cluster.preset" and "known: " in e.value.message and "perlmutter" in e.value.message


def test_cluster_validation_fields():
    gpu = GPU_PRESETS["h100-sxm"]
    with pytest.raises(ConfigError) as e:
        ClusterSpec("x", gpu, gpus_per_node=8, max_nodes=None, nvlink_bw=0.0, nic_bw=1e9, nics_per_node=1)
    assert e.value.field == "cluster.nvlink_bw"
    with pytest.raises(ConfigError) as e:
        ClusterSpec("x", gpu, gpus_per_node=0, max_nodes=None, nvlink_bw=1e9, nic_bw=1e9, nics_per_node=1)
    assert e.value.field == "cluster.gpus_per_node"
    with pytest.raises(ConfigError) as e:
        ClusterSpec("x", gpu, gpus_per_node=1, max_nodes=None, nvlink_bw=0.0, nic_bw=float("nan"), nics_per_node=1)
    assert e.value.field == "cluster.nic_bw"
    with pytest.raises(ConfigError) as e:
        ClusterSpec("x", gpu, 1, None, 0.0, 1e9, 1, inter_latency_s=-1e-6)
    assert e.value.field == "cluster.inter_latency_s"


def test_cluster_from_mapping_preset_overrides_in_scenario_units():
    c = cluster_from_mapping({"preset": "dgx-h100", "nic_gbps": 200, "intra_latency_us": 2, "gpu": "h200"})
    assert c.nic_bw == 25e9 and c.intra_latency_s == pytest.approx(2e-6) and c.gpu.name == "h200"
    assert c.nvlink_bw == DGX.nvlink_bw and c.gpus_per_node == 8


def test_cluster_from_mapping_explicit():
    c = cluster_from_mapping({"gpu": "h200", "gpus_per_node": 4, "nvlink_gbps": 450, "nic_gbps": 400,
                              "nics_per_node": 2, "max_nodes": 16})
    assert (c.name, c.gpus_per_node, c.nvlink_bw, c.nic_bw, c.nics_per_node, c.max_nodes) == \
        ("custom", 4, 450e9, 50e9, 2, 16)


@pytest.mark.parametrize("section,field", [
    ({"preset": "vista", "colour": "red"}, "cluster.colour"),
    ({"preset": "nope"}, "cluster.preset"),
    ({"gpu": "h200", "gpus_per_node": 4, "nic_gbps": 400, "nics_per_node": 4}, "cluster.nvlink_gbps"),
    ({"gpu": "h200", "gpus_per_node": 1, "nics_per_node": 1}, "cluster.nic_gbps"),
    ({"preset": "vista", "gpus_per_node": 4}, "cluster.nvlink_gbps"),  # 4 GPUs but no NVLink
    ({"preset": "vista", "nic_gbps": 0}, "cluster.nic_gbps"),
    ({"preset": "vista", "nic_gbps": "fast"}, "cluster.nic_gbps"),
    ({"preset": "vista", "gpus_per_node": 1.5}, "cluster.gpus_per_node"),
    ({"preset": "vista", "gpu": "b300"}, "cluster.gpu"),
])
def test_cluster_from_mapping_errors(section, field):
    with pytest.raises(ConfigError) as e:
        cluster_from_mapping(section)
    assert e.value.field == field


# ---------------------------------------------------------------- placement

def test_megatron_order_hand_check():
    p = place(4, 4, 8, 4)
    assert p.rank(1, 2, 3) == 1 * 32 + 2 * 4 + 3
    assert p.coords(43) == (1, 2, 3)
    assert p.mp_group(0, 1) == (4, 5, 6, 7)
    assert p.dp_group(0, 1) == (1, 5, 9, 13, 17, 21, 25, 29)
    assert p.nodes == 32


def test_spans_perlmutter_pp4_mp4_dp8():
    p = place(4, 4, 8, 4)
    assert p.mp_span() == (1, 4)
    assert p.dp_span() == (8, 1)
    assert [p.p2p_span(s) for s in range(3)] == [(2, 1)] * 3


def test_spans_pp4_mp2_dp2_gpn4():
    p = place(4, 2, 2, 4)
    assert p.dp_span() == (1, 2)
    assert p.mp_span() == (1, 2)
    assert p.p2p_span(0) == (2, 1)


def test_spans_vista_mp4():
    p = place(4, 4, 2, 1)
    assert p.mp_span() == (4, 1) and p.dp_span() == (2, 1) and p.p2p_span(2) == (2, 1)


def test_p2p_within_a_node():
    p = place(2, 1, 2, 4)  # 4 GPUs, one node: stage 0 = ranks 0,1; stage 1 = ranks 2,3
    assert p.p2p_span(0) == (1, 2)
    assert list(p.p2p_pairs(0)) == [(0, 2), (1, 3)]
    with pytest.raises(IndexError):
        p.p2p_span(1)


def test_placement_rejects_partial_node():
    with pytest.raises(ConfigError) as e:
        place(1, 1, 1, 8)
    assert e.value.field == "parallelism"
    assert e.value.message == "pp*mp*dp = 1 GPUs is not a multiple of cluster.gpus_per_node = 8"


def test_placement_rejects_uneven_groups():
    with pytest.raises(ConfigError) as e:
        place(1, 3, 4, 4)  # MP group 3..5 puts 1 GPU on node 0 and 2 on node 1
    assert e.value.field == "parallelism.mp"


def _should_reject(pp, mp, dp, gpn):
    """Brute force: partial nodes, or a group whose per-node GPU counts differ from another's or within itself."""
    if (pp * mp * dp) % gpn:
        return True
    for groups in ([[s * dp * mp + d * mp + m for m in range(mp)] for s in range(pp) for d in range(dp)],
                   [[s * dp * mp + d * mp + m for d in range(dp)] for s in range(pp) for m in range(mp)]):
        shapes = set()
        for grp in groups:
            counts = {}
            for r in grp:
                counts[r // gpn] = counts.get(r // gpn, 0) + 1
            shapes.add(tuple(sorted(counts.values())))
        if len(shapes) > 1 or len(set(next(iter(shapes)))) > 1:
            return True
    return False


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 6), mp=st.sampled_from([1, 2, 4, 8]), dp=st.integers(1, 6),
       gpn=st.sampled_from([1, 2, 4, 8]))
def test_every_rank_in_one_mp_and_one_dp_group(pp, mp, dp, gpn):
    try:
        p = place(pp, mp, dp, gpn)
    except ConfigError:
        assert _should_reject(pp, mp, dp, gpn)
        return
    assert not _should_reject(pp, mp, dp, gpn)
    for groups in (list(p.mp_groups()), list(p.dp_groups())):
        flat = [r for g in groups for r in g]
        assert sorted(flat) == list(range(p.gpus))
    for r in range(p.gpus):
        s, d, m = p.coords(r)
        assert p.rank(s, d, m) == r
        assert r in p.mp_group(s, d) and r in p.dp_group(s, m)
    for g in p.mp_groups():
        assert p.span(g) == p.mp_span()
    for g in p.dp_groups():
        assert p.span(g) == p.dp_span()


# ---------------------------------------------------------------- closed form
# Perlmutter: B_nv = 300 GB/s, B_net = 4 * 25 / 4 = 25 GB/s, a_nv = 4 us, a_net = 8 us.

@pytest.mark.parametrize("kind,entries,n,g,cluster,expected", [
    (AR, 600_000_000, 1, 4, PERL, 2 * 3 * 4e-6 + 2 * 0.75 * 1.2e9 / 300e9),  # 0.006024
    (AR, 500_000_000, 8, 1, PERL, 2 * 7 * 8e-6 + 2 * 7 / 8 * 1e9 / 25e9),  # 0.070112
    (AR, 600_000_000, 2, 4, PERL, 24e-6 + 0.006 + 16e-6 + 0.012),
    (AG, 100_000_000, 2, 4, PERL, 12e-6 + 3 * 2 * 2e8 / 300e9 + 8e-6 + 2e8 / 25e9),  # 0.01202
    (RS, 100_000_000, 2, 4, PERL, 0.01202),
    (P2P, 5_000_000, 1, 2, PERL, 4e-6 + 1e7 / 300e9),
    (P2P, 5_000_000, 2, 1, PERL, 8e-6 + 1e7 / 25e9),
    (AR, 500_000_000, 4, 1, VISTA, 2 * 3 * 8e-6 + 1.5 * 1e9 / 50e9),  # 0.030048
    (AR, 123, 1, 1, PERL, 0.0),
    (AG, 123, 1, 1, VISTA, 0.0),
])
def test_closed_form_hand_values(kind, entries, n, g, cluster, expected):
    assert closed_form_seconds(Collective(kind, entries, n, g), cluster) == pytest.approx(expected, rel=1e-12)


def test_closed_form_rejects_oversized_groups():
    with pytest.raises(ValueError):
        closed_form_seconds(Collective(AR, 10, 1, 8), PERL)
    with pytest.raises(ValueError):
        closed_form_seconds(Collective(P2P, 10, 2, 2), PERL)


def test_allreduce_is_reduce_scatter_plus_all_gather():
    for n, g in [(1, 4), (4, 1), (8, 4)]:
        p = n * g
        ar = closed_form_seconds(Collective(AR, 1000 * p, n, g), PERL)
        rs = closed_form_seconds(Collective(RS, 1000, n, g), PERL)
        ag = closed_form_seconds(Collective(AG, 1000, n, g), PERL)
        assert ar == pytest.approx(rs + ag, rel=1e-12)


def test_bus_bandwidth():
    # 8 ranks, 1 GB all-reduce in 0.1 s: algbw 10 GB/s, busbw 10 * 2 * 7/8 = 17.5 GB/s
    assert bus_bandwidth(Collective(AR, 500_000_000, 8, 1), 0.1) == pytest.approx(17.5e9)
    # all-gather of 4 shards of 1e8 bytes in 0.01 s: whole buffer 4e8 -> 40 GB/s * 3/4
    assert bus_bandwidth(Collective(AG, 50_000_000, 1, 4), 0.01) == pytest.approx(30e9)


_FILE = re.compile(r"_(allreduce_large|allreduce)_fp16_(\d+)_(\d+)\.csv$")


def _ratios(folder, cluster):
    out = {}
    for f in sorted(folder.glob("*.csv")):
        m = _FILE.search(f.name)
        if not m:
            continue
        n, g = int(m[2]), int(m[3])
        with f.open() as fh:
            out[f.name] = [float(r["dur(us)"]) * 1e-6 / closed_form_seconds(
                Collective(AR, int(float(r["shape"])), n, g), cluster) for r in csv.DictReader(fh)]
    return out


def test_closed_form_against_reference_allreduce(reference_data):
    # Vista's InfiniBand all-reduces run close to line rate: the closed form is within 15 %.
    vista = _ratios(reference_data / "Vista" / "nccl", VISTA)
    assert len(vista) == 6
    for name, r in vista.items():
        assert 0.95 < statistics.median(r) < 1.15, name
    # Perlmutter never beats the line-rate bound; across nodes it is ~20x slower (known quirk).
    perl = _ratios(reference_data / "Perlmutter" / "nccl", PERL)
    assert len(perl) == 12
    for name, r in perl.items():
        assert min(r) > 1.0, name


# ---------------------------------------------------------------- graph and link model

def test_graph_two_dgx_h100_nodes():
    g = build_graph(DGX, 2)
    assert g.number_of_nodes() == 16 + 2 + 16 + 1
    tiers = [t for _, _, t in g.edges(data="tier")]
    assert len(tiers) == 48 and tiers.count("nvlink") == 16 and tiers.count("nic") == 32
    assert g.edges["gpu9", "nvswitch1"]["capacity"] == 360e9
    assert g.edges["gpu9", "nic1.1"]["link"] == "nic:1.1"
    assert g.edges["nic0.3", "fabric"]["capacity"] == 50e9


def test_graph_vista_has_no_nvswitch():
    g = build_graph(VISTA, 3)
    assert sorted(g.nodes) == ["fabric", "gpu0", "gpu1", "gpu2", "nic0.0", "nic1.0", "nic2.0"]
    assert g.number_of_edges() == 6


def test_graph_paths_match_p2p_loads():
    lm = LinkModel(DGX, place(2, 8, 1, 8))
    g = build_graph(DGX, 2)
    for src, dst in [(3, 5), (3, 12)]:
        path = nx.shortest_path(g, f"gpu{src}", f"gpu{dst}")
        links = {g.edges[a, b]["link"] for a, b in zip(path[:-1], path[1:], strict=True)}
        assert links == set(lm.loads_p2p(src, dst))


def test_link_model_capacities_and_limits():
    lm = LinkModel(DGX, place(2, 8, 1, 8))
    assert len(lm.capacities) == 16 + 16
    assert lm.capacities["nvlink:15"] == 360e9 and lm.capacities["nic:1.7"] == 50e9
    assert lm.tier("nvlink:3") == "nvlink" and lm.tier("nic:0.2") == "nic"
    small = ClusterSpec("small", DGX.gpu, 8, 1, 450e9, 50e9, 8)
    with pytest.raises(ConfigError) as e:
        LinkModel(small, place(2, 8, 1, 8))
    assert e.value.field == "parallelism"


def test_ring_allreduce_in_one_node():
    lm = LinkModel(DGX, place(1, 8, 1, 8))
    loads = lm.loads(AR, range(8))
    assert loads == {f"nvlink:{r}": pytest.approx(2 * 7 / 8) for r in range(8)}


def test_dp_group_across_nodes_loads_nics():
    p = place(1, 4, 8, 4)  # Perlmutter 8 nodes, DP groups of 8 with one GPU per node
    lm = LinkModel(PERL, p)
    loads = lm.loads(AR, p.dp_group(0, 2))
    assert set(loads) == {f"nic:{n}.2" for n in range(8)}  # local GPU 2 -> NIC 2 on every node
    assert all(v == pytest.approx(2 * 7 / 8) for v in loads.values())
    # a 2-node x 4-GPU all-gather: both tiers loaded, NIC share per GPU = n - 1 = 1
    lm2 = LinkModel(PERL, place(1, 8, 1, 4))
    ag = lm2.loads(AG, range(8))
    assert ag["nvlink:5"] == pytest.approx(3 * 2) and ag["nic:1.1"] == pytest.approx(1.0)
    assert lm2.loads(AR, [6]) == {}


def test_shared_nic_adds_up():
    two_nics = ClusterSpec("x", DGX.gpu, 4, None, 300e9, 25e9, 2)
    lm = LinkModel(two_nics, place(1, 4, 2, 4))
    loads = lm.loads(AR, range(8))  # 2 nodes x 4 GPUs; GPUs 0,1 -> NIC 0 and 2,3 -> NIC 1
    assert loads["nic:0.0"] == pytest.approx(2 * 2 * 1 / (2 * 4))
    assert lm.loads_p2p(1, 5) == {"nic:0.0": 1.0, "nic:1.0": 1.0}


def test_more_nics_than_gpus_split_traffic():
    c = ClusterSpec("x", VISTA.gpu, 1, None, 0.0, 25e9, 2)
    lm = LinkModel(c, place(2, 1, 1, 1))
    assert lm.loads_p2p(0, 1) == {"nic:0.0": 0.5, "nic:0.1": 0.5, "nic:1.0": 0.5, "nic:1.1": 0.5}
    assert lm.uncontended_seconds(P2P, (0, 1), 5e9) == pytest.approx(
        closed_form_seconds(Collective(P2P, 2_500_000_000, 2, 1), c))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["perlmutter", "vista", "dgx-h100", "dgx-a100"]), pp=st.integers(1, 3),
       mp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4, 8]), entries=st.integers(1, 10**9))
def test_link_model_matches_closed_form(name, pp, mp, dp, entries):
    cluster = get_cluster(name)
    try:
        p = Placement(Parallelism(pp=pp, mp=mp, dp=dp), cluster.gpus_per_node)
    except ConfigError:
        return
    lm = LinkModel(cluster, p)
    for kind in (AR, AG):
        for group, span in ((p.mp_group(0, 0), p.mp_span()), (p.dp_group(0, 0), p.dp_span())):
            want = closed_form_seconds(Collective(kind, entries, *span), cluster)
            assert lm.uncontended_seconds(kind, group, 2.0 * entries) == pytest.approx(want, rel=1e-9)
    for s in range(pp - 1):
        a, b = p.rank(s, 0, 0), p.rank(s + 1, 0, 0)
        want = closed_form_seconds(Collective(P2P, entries, *p.p2p_span(s)), cluster)
        assert lm.uncontended_seconds(P2P, (a, b), 2.0 * entries) == pytest.approx(want, rel=1e-9)


def test_nic_loads_of_a_dp_group_sum_to_ring_volume():
    p = place(2, 2, 8, 4)  # DP groups: 8 ranks, 2 per node on 4 nodes
    lm = LinkModel(PERL, p)
    assert p.dp_span() == (4, 2)
    loads = lm.loads(AR, p.dp_group(1, 1))
    nic = sum(v for k, v in loads.items() if lm.tier(k) == "nic")
    assert nic == pytest.approx(8 * 2 * 3 / (4 * 2))  # every GPU sends 2(n-1)/(n c) of the buffer
    assert sum(1 for k in loads if k.startswith("nvlink:")) == 8


def test_large_layout_builds_all_groups():
    # Not timed here (see benchmarks/bench_topology.py); checks the 16,384-GPU layout is coherent.
    p = place(16, 8, 128, 8)
    lm = LinkModel(DGX, p)
    assert p.mp_span() == (1, 8) and p.dp_span() == (128, 1) and p.p2p_span(7) == (2, 1)
    loads = lm.loads(AR, p.dp_group(15, 7))
    assert len(loads) == 128 and "nic:2047.7" in loads
    assert len(lm.capacities) == 16384 + 2048 * 8


def test_presets_are_all_valid_and_named():
    for key, c in CLUSTER_PRESETS.items():
        assert c.name == key
