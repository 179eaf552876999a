"""HGX presets, 2-GPU nodes made from a preset (NICs follow the GPUs), and layouts that do not fit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainsim.operators.errors import ConfigError
from trainsim.topology import cluster as cluster_mod
from trainsim.topology.cluster import (
    CLUSTER_PRESETS,
    NVLINK4_MEASURED_BW,
    ClusterSpec,
    cluster_from_mapping,
    get_cluster,
)
from trainsim.topology.hardware import GPU_PRESETS

GBIT = 1e9 / 8


@pytest.mark.parametrize("name,gpu", [("hgx-h100", "h100-sxm"), ("hgx-h200", "h200")])
def test_hgx_presets(name, gpu):
    c = get_cluster(name)
    assert c.gpu == GPU_PRESETS[gpu] and c.gpus_per_node == 8 and c.max_nodes is None
    # NVLink 4 via NVSwitch: 900 GB/s bidirectional per GPU on the datasheet; the presets carry the
    # 360 GB/s per direction NCCL was measured to move (topology.cluster.NVLINK4_MEASURED_BW)
    assert c.nvlink_bw == NVLINK4_MEASURED_BW == 360e9
    assert c.nic_bw == 400 * GBIT and c.nics_per_node == 8  # one NDR NIC per GPU
    assert c.nic_bw_per_gpu == 400 * GBIT


@pytest.mark.parametrize("preset", sorted(CLUSTER_PRESETS))
def test_overriding_gpus_per_node_keeps_nics_per_gpu(preset):
    base = get_cluster(preset)
    assert base.nics_per_node == base.gpus_per_node  # every preset wires one NIC per GPU
    c = cluster_from_mapping({"preset": preset, "gpus_per_node": 2, "nvlink_gbps": 450})
    assert c.gpus_per_node == 2 and c.nics_per_node == 2
    assert c.nic_bw_per_gpu == base.nic_bw_per_gpu  # a GPU's network share is the preset's


def test_two_gpu_node_from_hgx():
    c = cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": 2})
    assert (c.name, c.gpus_per_node, c.nics_per_node, c.nvlink_bw) == ("hgx-h100", 2, 2, 360e9)
    # naming nics_per_node keeps it as given (e.g. a node that keeps all 8 NICs for 2 GPUs)
    c8 = cluster_from_mapping({"preset": "hgx-h100", "gpus_per_node": 2, "nics_per_node": 8})
    assert c8.nics_per_node == 8 and c8.nic_bw_per_gpu == 4 * c.nic_bw_per_gpu
    # nics_per_node alone does not move gpus_per_node
    assert cluster_from_mapping({"preset": "hgx-h100", "nics_per_node": 4}).gpus_per_node == 8


def test_the_single_h100_sxm_preset_makes_a_two_gpu_node_with_gpus_per_node_alone():
    # the single-GPU scenarios (gptneox-h100) start from it; an SXM part sits on an NVLink board
    c = cluster_from_mapping({"preset": "h100-sxm", "gpus_per_node": 2})
    assert (c.gpus_per_node, c.nics_per_node, c.nvlink_bw) == (2, 2, NVLINK4_MEASURED_BW)
    assert cluster_from_mapping({"preset": "h100-sxm"}).gpus_per_node == 1


def test_the_single_h200_sxm_preset_and_its_scenario_price_the_validation_tables_row():
    # gptneox-h200 is the lent H200's single-GPU workload: the same iteration as gptneox-h100 given the H200
    # and its profile, as `trainsim validate` prices an H200 table's rows
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario

    c = cluster_from_mapping({"preset": "h200-sxm", "gpus_per_node": 2})
    assert (c.gpu.name, c.gpus_per_node, c.nvlink_bw) == ("h200", 2, NVLINK4_MEASURED_BW)
    own = predict(load_scenario("gptneox-h200"))
    told = predict(load_scenario("gptneox-h100", ["cluster.gpu=h200", "profile.name=h200-sxm-bf16"]))
    assert own.eq7.iteration_s == told.eq7.iteration_s and own.scenario.cluster.name == "h200-sxm"


def test_a_preset_without_nvlink_says_so_when_given_more_gpus_per_node():
    with pytest.raises(ConfigError) as e:
        cluster_from_mapping({"preset": "vista", "gpus_per_node": 2})
    assert e.value.field == "cluster.nvlink_gbps"
    assert "preset 'vista' has no NVLink" in e.value.message and "give cluster.nvlink_gbps" in e.value.message
    assert cluster_from_mapping({"preset": "vista", "gpus_per_node": 2, "nvlink_gbps": 450}).nvlink_bw == 450e9
    with pytest.raises(ConfigError) as e:  # a zero the user wrote is reported as the value it is
        cluster_from_mapping({"preset": "h100-sxm", "gpus_per_node": 2, "nvlink_gbps": 0})
    assert e.value.field == "cluster.nvlink_gbps" and "must be positive" in e.value.message


def test_a_ratio_without_whole_nics_asks_for_nics_per_node(monkeypatch):
    half = ClusterSpec("half", GPU_PRESETS["h100-sxm"], gpus_per_node=8, max_nodes=None, nvlink_bw=450e9,
                       nic_bw=400 * GBIT, nics_per_node=4)
    monkeypatch.setitem(cluster_mod.CLUSTER_PRESETS, "half", half)
    assert cluster_from_mapping({"preset": "half", "gpus_per_node": 4}).nics_per_node == 2
    with pytest.raises(ConfigError) as e:
        cluster_from_mapping({"preset": "half", "gpus_per_node": 1})
    assert e.value.field == "cluster.nics_per_node" and "give cluster.nics_per_node" in e.value.message
    assert cluster_from_mapping({"preset": "half", "gpus_per_node": 1, "nics_per_node": 1}).nics_per_node == 1
    with pytest.raises(ConfigError) as e:  # a bad GPU count is still reported under its own field
        cluster_from_mapping({"preset": "half", "gpus_per_node": 0})
    assert e.value.field == "cluster.gpus_per_node"


def test_scenario_on_two_gpu_hgx_nodes_predicts():
    import trainsim

    sc = trainsim.load_scenario("gpt20b-dgxh100", overrides={
        "cluster.preset": "hgx-h100", "cluster.gpus_per_node": 2, "profile.name": "roofline",
        "parallelism.pp": 2, "parallelism.mp": 2, "parallelism.dp": 2})
    assert (sc.cluster.gpus_per_node, sc.cluster.nics_per_node) == (2, 2)
    pred = trainsim.predict(sc)
    assert pred.costs.mp_span == (1, 2) and pred.costs.p2p_spans == ((2, 1),)  # stages on different nodes
    assert pred.iteration_s > 0


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("sets,needles", [
    # 128 GPUs on at most 4 nodes of 8
    (["cluster.max_nodes=4"], ["parallelism: pp*mp*dp = 128 GPUs need 16 nodes", "cluster.max_nodes = 4 (32 GPUs)"]),
    # 2-GPU nodes of an HGX preset: 128 GPUs need 64 of them
    (["cluster.preset=hgx-h100", "cluster.gpus_per_node=2", "cluster.max_nodes=8"],
     ["need 64 nodes of cluster.gpus_per_node = 2", "cluster.max_nodes = 8 (16 GPUs)"]),
    (["parallelism.pp=1", "parallelism.mp=4", "parallelism.dp=3"],
     ["parallelism: pp*mp*dp = 12 GPUs is not a multiple of cluster.gpus_per_node = 8"]),
    (["cluster.preset=hgx-h200", "cluster.gpus_per_node=2", "parallelism.pp=1", "parallelism.mp=1",
      "parallelism.dp=3"], ["parallelism: pp*mp*dp = 3 GPUs is not a multiple of cluster.gpus_per_node = 2"]),
])
def test_layout_that_does_not_fit_the_cluster_is_one_line_exit_2(tmp_path, sets, needles):
    r = cli("predict", "gpt20b-dgxh100", "--set", "profile.name=roofline",
            *[a for s in sets for a in ("--set", s)], cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("trainsim: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr
