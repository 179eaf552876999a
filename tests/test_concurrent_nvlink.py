"""The NVLink port sharing of sim/network.py against measured concurrent collectives on 4 H100s.

validation/concurrent_h100_4gpu/concurrent.jsonl (validation/concurrent_collectives.py): a 2x2
layout's tensor-parallel pairs {0,1}, {2,3} and data-parallel pairs {0,2}, {1,3}, each alone and
all at once, so that every GPU's NVLink port carries one TP and one DP collective. The model: four
flows with their measured alone times, one byte of port load per byte of message on each of
their two GPUs' ports (a pair's all-reduce moves 2(c-1)/c = 1, its all-gather (c-1) = 1 of the
shard), ports of the hgx-h100 preset's capacity, shared max-min.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import simpy

from trainsim.sim.network import Network
from trainsim.topology.cluster import CLUSTER_PRESETS

DATA = Path(__file__).resolve().parents[1] / "validation" / "concurrent_h100_4gpu" / "concurrent.jsonl"
PAIRS = {"tp": ((0, 1), (2, 3)), "dp": ((0, 2), (1, 3))}


def _rows() -> dict[tuple[str, int], dict[str, dict]]:
    out: dict[tuple[str, int], dict[str, dict]] = {}
    for line in DATA.read_text().splitlines():
        r = json.loads(line)
        out.setdefault((r["collective"], r["bytes"]), {})[r["mode"]] = r
    return out


def simulated_together(alone: dict[str, float], nbytes: float, capacity: float) -> dict[str, float]:
    """Each family's time (the slower of its two pairs) when all four pairs start together."""
    env = simpy.Environment()
    net: Network[str] = Network(env, {f"nvlink:{g}": capacity for g in range(4)})
    done: dict[str, list[simpy.Event]] = {"tp": [], "dp": []}
    for family, pairs in PAIRS.items():
        for a, b in pairs:
            done[family].append(net.transfer(alone[family], {f"nvlink:{a}": 1.0, f"nvlink:{b}": 1.0}, nbytes,
                                             family))
    ends: dict[str, float] = {}

    def watch(family: str):
        yield env.all_of(done[family])
        ends[family] = env.now

    for family in done:
        env.process(watch(family))
    env.run()
    return ends


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather"])
def test_port_sharing_against_the_measured_2x2(collective):
    cap = CLUSTER_PRESETS["hgx-h100"].nvlink_bw
    checked = 0
    for (coll, nbytes), modes in sorted(_rows().items()):
        if coll != collective:
            continue
        alone = {"tp": modes["tp"]["tp_s"], "dp": modes["dp"]["dp_s"]}
        both = simulated_together(alone, nbytes, cap)
        datasheet = simulated_together(alone, nbytes, 450e9)
        for family in ("tp", "dp"):
            measured = modes["both"][f"{family}_s"]
            if nbytes >= 64 * 2**20:  # bandwidth-bound: the port is shared, each slows by 1.5-1.9x
                assert measured / alone[family] > 1.4
                # the model slows them too, by less: it under-prices by 5-32 % (docs/multi_gpu.md) ...
                assert both[family] > 1.1 * alone[family]
                assert -0.35 <= both[family] / measured - 1 <= 0.0
                # ... and by more (24-40 %) with the datasheet's 450 GB/s instead of the measured port
                assert abs(datasheet[family] / measured - 1) > abs(both[family] / measured - 1)
                checked += 1
            else:  # 8 MiB: latency-bound, the two flows fit under the port; the model leaves them alone
                assert both[family] == pytest.approx(alone[family])
    assert checked == 4
