"""validation/trace_against_1gpu.py and validation/probe_power_comm.py's summary, on cases worked by hand."""

import pytest

from tests.validation_script import load_script

tr = load_script("trace_against_1gpu")
pc = load_script("probe_power_comm")

AG = "ncclDevKernel_AllGather_RING_LL"


def _run(layout, kernels, wall=1.0):
    return {"layout": layout, "name": "s", "wall_s": wall, "kernels": kernels}


# one GPU: two GEMMs of 100 us and an add of 50. The layout: the first GEMM (now 130 us) runs with an
# all-gather beside it for 100 of its 130 us, the second (104 us) alone; a copy-out of 20 us; the add as before
ONE = [[0, 0.0, 100.0, "nvjet_a"], [0, 100.0, 50.0, "add"], [0, 150.0, 100.0, "nvjet_b"]]
TWO = [[0, 0.0, 130.0, "nvjet_a"], [0, 10.0, 100.0, AG], [0, 130.0, 50.0, "add"],
       [0, 180.0, 20.0, "split_with_sizes_copy_out"], [0, 200.0, 104.0, "nvjet_b"]]


def test_gemms_split_by_what_ran_beside_them():
    g = tr.gemms(TWO)
    assert [(n, d, w) for n, d, w in g] == [("nvjet_a", 130.0, "beside NCCL >50 %"), ("nvjet_b", 104.0, "alone")]


def test_split_by_hand():
    runs = {("1gpu", "s"): _run("1gpu", ONE, 0.3), ("fsdp2", "s"): _run("fsdp2", TWO, 0.31)}
    s = tr.split(runs, "fsdp2")["s"]
    assert s["walls"] == (0.3, 0.31)
    assert s["classes"]["gemm/attention"] == (200.0, 234.0)
    assert s["classes"]["copy_out"] == (0.0, 20.0) and s["classes"]["nccl"] == (0.0, 100.0)
    assert s["classes"]["other"] == (50.0, 50.0)
    assert s["gemms"] == {"beside NCCL >50 %": (1, 100.0, 130.0), "alone": (1, 100.0, 104.0)}
    assert (s["matched"], s["counts"]) == (2, (2, 2))
    assert any("x1.300" in line for line in tr.report(runs, "fsdp2"))


def test_a_gemm_order_that_differs_is_not_matched():
    swapped = [TWO[4], *TWO[1:4], TWO[0]]
    s = tr.split({("1gpu", "s"): _run("1gpu", ONE), ("tp2", "s"): _run("tp2", swapped)}, "tp2")["s"]
    assert s["matched"] == 0 and s["gemms"] == {}


def test_power_comm_summary_by_hand():
    rows = []
    # GEMM burst 1.0 ms, sustained 1.15; a copy 0.2 -> 0.2; an all-gather 0.5 -> 0.5; the GEMM and two
    # all-gathers: burst 2.0 (D = 0.5), sustained 2.05 -> g = (2.05 - 2 x 0.5) / 1.0 = 1.05
    for kernel, burst, window in (("gemm_bf16_8192", 1e-3, 1.15e-3), ("copy_256mib", 2e-4, 2e-4),
                                  ("ag_256mib", 5e-4, 5e-4), ("mix_bf16_ag2", 2e-3, 2.05e-3)):
        for rank in (0, 1):
            rows.append({"kernel": kernel, "rank": rank, "burst_s": burst, "window_s": window,
                         "window_ratio": window / burst, "sm_mhz_median": 1500.0, "power_w_median": 600.0})
    lines = pc.summarize(rows)
    ag = next(line for line in lines if line.startswith("mix_bf16_ag2"))
    d, g = (float(x) for x in ag.split()[1:3])
    assert d == pytest.approx(0.5) and g == pytest.approx(1.05)
    assert next(line for line in lines if line.startswith("gemm_bf16_8192")).split()[1:3] == ["1.000", "1.150"]


def test_power_comm_block_summary_by_hand():
    # four GEMMs of 1.4 ms (5.6 ms in a burst, 6.16 sustained), then 4 ms idle: D = 5.6 / 9.6, g = 1.1
    rows = [{"kernel": "blk4_i4", "rank": 0, "burst_s": 9.6e-3, "window_s": 1.0e-2, "window_ratio": 1.04,
             "sm_mhz_median": 1500.0, "power_w_median": 600.0, "block_burst_s": 5.6e-3, "block_window_s": 6.16e-3,
             "idle_ms": 4.0}]
    d, g = (float(x) for x in pc.summarize(rows)[1].split()[1:3])
    assert d == pytest.approx(5.6 / 9.6, abs=1e-3) and g == pytest.approx(1.1, abs=1e-3)


def test_power_comm_block_against_the_lone_gemm_burst():
    # with the lone GEMM in the file, a block of 4 is 4 x its 1.4 ms burst: D = 5.6 / 9.6, g = 6.16 / 5.6
    gemm = {"kernel": "gemm_bf16_8192", "rank": 0, "burst_s": 1.4e-3, "window_s": 1.6e-3, "window_ratio": 1.6 / 1.4,
            "sm_mhz_median": 1500.0, "power_w_median": 690.0}
    block = {"kernel": "blk4_i4", "rank": 0, "burst_s": 9.6e-3, "window_s": 1.0e-2, "window_ratio": 1.04,
             "sm_mhz_median": 1500.0, "power_w_median": 600.0, "block_k": 4, "block_burst_s": 6.0e-3,
             "block_window_s": 6.16e-3, "idle_ms": 4.0}
    d, g = (float(x) for x in pc.summarize([gemm, block])[2].split()[1:3])
    assert d == pytest.approx(5.6 / 9.6, abs=1e-3) and g == pytest.approx(1.1, abs=1e-3)
