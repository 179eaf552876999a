"""The cited GPU datasheet table (topology/hardware.py, docs/gpus.md) and the device-name lookup."""

import dataclasses
import re
from pathlib import Path

import pytest

from trainsim.operators import ConfigError
from trainsim.topology.hardware import GPU_PRESETS, GPUSpec, get_gpu, gpu_for_device_name

ROOT = Path(__file__).resolve().parents[1]
FP8_PARTS = ("h100-sxm", "h100-pcie", "h200", "gh200", "b200", "mi300x")
NO_FP8_PARTS = ("a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb")


def test_every_preset_validates_and_is_cited():
    assert set(FP8_PARTS + NO_FP8_PARTS) == set(GPU_PRESETS)
    for key, gpu in GPU_PRESETS.items():
        assert gpu.name == key
        assert GPUSpec(**dataclasses.asdict(gpu)) == gpu  # re-validates every field
        assert gpu.source.strip(), key
        assert gpu.sm_count > 0 and gpu.peak_fp32 > 0, key
        # fp32 (vector) is well below the tensor peak on every part listed
        assert gpu.peak_fp32 < gpu.peak_flops / 5, key


def test_fp8_is_twice_bf16_where_present():
    # The datasheets print FP8 = 2 x FP16/BF16 (H100 SXM: 3,958 and 1,979 sparse). Dense figures are
    # printed to the TFLOP/s, so 2 x a rounded BF16 may differ from the rounded FP8 by one unit.
    for key in FP8_PARTS:
        gpu = GPU_PRESETS[key]
        assert gpu.peak_fp8 == pytest.approx(2 * gpu.peak_flops, rel=0, abs=1e12), key
    for key in NO_FP8_PARTS:
        assert GPU_PRESETS[key].peak_fp8 == 0.0, key


def test_datasheet_figures():
    h100 = get_gpu("h100-sxm")
    assert (h100.peak_flops, h100.peak_fp8, h100.mem_bw, h100.mem_gib) == (989e12, 1979e12, 3.35e12, 80)
    assert (h100.sm_count, h100.l2_mib, h100.peak_fp32) == (132, 50, 67e12)
    pcie = get_gpu("h100-pcie")
    assert pcie.mem_bw == 2.0e12 and pcie.peak_flops == 756.5e12 and pcie.peak_fp8 == 1513e12
    assert pcie.sm_count == 114 and pcie.peak_fp32 == 51e12
    # H200 and GH200 carry the H100 SXM's compute with other memory
    for key, bw, gib in (("h200", 4.8e12, 141), ("gh200", 4.0e12, 96)):
        gpu = get_gpu(key)
        assert (gpu.peak_flops, gpu.peak_fp8, gpu.sm_count) == (h100.peak_flops, h100.peak_fp8, 132)
        assert (gpu.mem_bw, gpu.mem_gib) == (bw, gib)
    assert get_gpu("a100-sxm4-40gb").mem_bw == 1.555e12 and get_gpu("a100-sxm4-80gb").mem_bw == 2.039e12
    assert get_gpu("a100-pcie-80gb").mem_bw == 1.935e12
    for key in NO_FP8_PARTS:
        gpu = get_gpu(key)
        assert (gpu.peak_flops, gpu.peak_fp32, gpu.sm_count, gpu.l2_mib) == (312e12, 19.5e12, 108, 40)
    b200 = get_gpu("b200")
    assert (b200.peak_flops, b200.peak_fp8, b200.mem_bw, b200.mem_gib, b200.sm_count) == (
        2.25e15, 4.5e15, 7.7e12, 180, 148)
    mi = get_gpu("MI300X")  # get_gpu is case-insensitive
    assert (mi.peak_flops, mi.peak_fp8, mi.peak_fp32, mi.mem_bw, mi.mem_gib, mi.sm_count, mi.l2_mib) == (
        1307.4e12, 2614.9e12, 163.4e12, 5.3e12, 192, 304, 256)


def test_existing_constructions_unchanged():
    # positional (name, peak_flops, mem_bw, mem_gib) still builds a spec, the new fields defaulting
    gpu = GPUSpec("x", 1e12, 1e11, 16)
    assert (gpu.peak_fp8, gpu.peak_fp32, gpu.sm_count, gpu.l2_mib, gpu.source) == (0.0, 0.0, 0, 0.0, "")


@pytest.mark.parametrize("field, value", [
    ("peak_fp8", -1e12), ("peak_fp32", -1.0), ("sm_count", -1), ("l2_mib", -0.5),
    ("peak_fp8", float("nan")), ("sm_count", 1.5), ("l2_mib", "40"),
])
def test_bad_new_fields_name_the_field(field, value):
    with pytest.raises(ConfigError) as e:
        GPUSpec("x", 1e12, 1e11, 16, **{field: value})
    assert e.value.field == f"cluster.gpu.{field}"


def test_negative_fp8_message():
    with pytest.raises(ConfigError) as e:
        GPUSpec("x", 1e12, 1e11, 16, peak_fp8=-1.0)
    assert e.value.field == "cluster.gpu.peak_fp8" and "cluster.gpu.peak_fp8" in str(e.value)
    with pytest.raises(ConfigError) as e:
        GPUSpec("x", 1e12, 1e11, 16, source=None)  # type: ignore[arg-type]
    assert e.value.field == "cluster.gpu.source"


@pytest.mark.parametrize("device, key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("  nvidia   h100 80gb HBM3 ", "h100-sxm"),
])
def test_device_names(device, key):
    assert gpu_for_device_name(device) == key
    assert key in GPU_PRESETS


@pytest.mark.parametrize("device", ["Tesla K80", "", "NVIDIA H100 NVL", "NVIDIA H200 NVL",
                                    "NVIDIA GH200 144G HBM3e", "h100-sxm", "NVIDIA H100"])
def test_unknown_device_names(device):
    assert gpu_for_device_name(device) is None


def test_measured_profiles_map_to_presets():
    # the GPUs the shipped profiles were measured on are known by the names their meta.json records
    assert gpu_for_device_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert gpu_for_device_name("NVIDIA H200") == "h200"


def test_doc_table_matches_presets():
    text = (ROOT / "docs" / "gpus.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|.*$", text, re.M)}
    assert set(rows) == set(GPU_PRESETS)
    for key, gpu in GPU_PRESETS.items():
        cells = [c.strip() for c in rows[key].strip("|").split("|")]
        assert float(cells[1].replace(",", "")) == pytest.approx(gpu.peak_flops / 1e12), key
        fp8 = 0.0 if cells[2] == "-" else float(cells[2].replace(",", ""))
        assert fp8 == pytest.approx(gpu.peak_fp8 / 1e12), key
        assert float(cells[3]) == gpu.mem_gib and float(cells[4]) == pytest.approx(gpu.mem_bw / 1e12), key
        assert int(cells[5].split()[0]) == gpu.sm_count, key
