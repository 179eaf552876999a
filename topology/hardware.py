"""GPU hardware figures used by the roofline fallback, the memory check and transfer profiles.

Figures are the vendors' datasheet numbers for *dense* tensor throughput (NVIDIA's datasheets
print the 2:4-sparsity figure, twice as large, and footnote that dense is half of it), HBM
bandwidth and capacity. They are peaks: measured kernels reach a fraction. Every preset carries
its citation in ``source``; docs/gpus.md has the table. Cache sizes the vendors print in "MB"
are binary (CUDA reports 52,428,800 bytes of L2 on the H100 SXM, NVIDIA's "50 MB"), so
``l2_mib`` holds the printed number.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.operators.errors import ConfigError, check_number, require_positive


@dataclass(frozen=True)
class GPUSpec:
    """One GPU's datasheet peaks. The first four fields are all the simulator prices with; the
    rest describe the part for transfer profiles and reports (0 = not stated / not present)."""

    name: str
    peak_flops: float  # dense fp16/bf16 tensor-core FLOP/s
    mem_bw: float  # HBM bytes/s
    mem_gib: float  # HBM capacity as the datasheet states it (GB there; treated as GiB for headroom checks)
    peak_fp8: float = 0.0  # dense FP8 tensor FLOP/s; 0 = no FP8 tensor cores
    peak_fp32: float = 0.0  # non-tensor (vector) FP32 FLOP/s; informational
    sm_count: int = 0  # streaming multiprocessors (compute units on AMD parts); 0 = not stated
    l2_mib: float = 0.0  # last-level on-chip cache, MiB; 0 = not stated
    source: str = ""  # the citation: datasheet title/year and the column used

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("cluster.gpu", "GPU name must not be empty")
        require_positive("cluster.gpu.peak_flops", self.peak_flops)
        require_positive("cluster.gpu.mem_bw", self.mem_bw)
        require_positive("cluster.gpu.mem_gib", self.mem_gib)
        check_number("cluster.gpu.peak_fp8", self.peak_fp8, minimum=0)
        check_number("cluster.gpu.peak_fp32", self.peak_fp32, minimum=0)
        check_number("cluster.gpu.sm_count", self.sm_count, integer=True, minimum=0)
        check_number("cluster.gpu.l2_mib", self.l2_mib, minimum=0)
        if not isinstance(self.source, str):
            raise ConfigError("cluster.gpu.source", f"must be a string, got {type(self.source).__name__}")


_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (2023)"

GPU_PRESETS: dict[str, GPUSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column: FP16/BF16 tensor 312 TFLOPS
    # (624 sparse), no FP8, FP32 19.5 TFLOPS; 80 GB HBM2e at 2,039 GB/s. 108 SMs and 40 MB L2 from
    # the NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020). The reference samples were
    # taken on this part.
    "a100-sxm4-80gb": GPUSpec("a100-sxm4-80gb", 312e12, 2.039e12, 80, peak_fp8=0.0, peak_fp32=19.5e12,
                              sm_count=108, l2_mib=40,
                              source=f"{_A100_DS}, A100 80GB SXM column; SMs and L2 from the A100 "
                                     "architecture whitepaper (2020)"),
    # Same datasheet, A100 40GB SXM column: same compute; 40 GB HBM2 at 1,555 GB/s (most of
    # Perlmutter's GPU nodes).
    "a100-sxm4-40gb": GPUSpec("a100-sxm4-40gb", 312e12, 1.555e12, 40, peak_fp8=0.0, peak_fp32=19.5e12,
                              sm_count=108, l2_mib=40,
                              source=f"{_A100_DS}, A100 40GB SXM column; SMs and L2 from the A100 "
                                     "architecture whitepaper (2020)"),
    # NVIDIA GH200 Grace Hopper Superchip datasheet, the 96 GB HBM3 variant (TACC Vista): H100 die
    # with 132 SMs, FP16/BF16 tensor 989 TFLOPS dense (1,979 sparse), FP8 1,979 dense (3,958
    # sparse), FP32 67 TFLOPS; 96 GB HBM3 at 4 TB/s. The datasheet does not print the L2 size: 0.
    "gh200": GPUSpec("gh200", 989e12, 4.0e12, 96, peak_fp8=1979e12, peak_fp32=67e12, sm_count=132,
                     l2_mib=0.0,
                     source="NVIDIA GH200 Grace Hopper Superchip datasheet, 96GB HBM3 configuration "
                            "(GPU figures); L2 not printed"),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP16/BF16 tensor 989 TFLOPS dense
    # (1,979 sparse), FP8 1,979 dense (3,958 sparse), FP32 67 TFLOPS; 80 GB HBM3 at 3.35 TB/s.
    # 132 SMs and 50 MB L2 from the NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022).
    "h100-sxm": GPUSpec("h100-sxm", 989e12, 3.35e12, 80, peak_fp8=1979e12, peak_fp32=67e12, sm_count=132,
                        l2_mib=50,
                        source=f"{_H100_DS}, H100 SXM column; SMs and L2 from the H100 architecture "
                               "whitepaper (2022)"),
    # NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column: same compute as H100 SXM;
    # 141 GB HBM3e at 4.8 TB/s. Same 132-SM GH100 configuration as the H100 SXM, whose L2 (50 MB,
    # H100 whitepaper) it keeps; the H200 datasheet does not print SMs or L2.
    "h200": GPUSpec("h200", 989e12, 4.8e12, 141, peak_fp8=1979e12, peak_fp32=67e12, sm_count=132, l2_mib=50,
                    source="NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column; SMs and L2 "
                           "as the H100 SXM (H100 architecture whitepaper, 2022)"),
    # NVIDIA A100 datasheet (2021), A100 80GB PCIe column: same compute as the SXM part (312 TFLOPS
    # dense, FP32 19.5); 80 GB HBM2e at 1,935 GB/s. 108 SMs, 40 MB L2 (A100 whitepaper).
    "a100-pcie-80gb": GPUSpec("a100-pcie-80gb", 312e12, 1.935e12, 80, peak_fp8=0.0, peak_fp32=19.5e12,
                              sm_count=108, l2_mib=40,
                              source=f"{_A100_DS}, A100 80GB PCIe column; SMs and L2 from the A100 "
                                     "architecture whitepaper (2020)"),
    # NVIDIA H100 datasheet, H100 PCIe column: FP16/BF16 tensor 1,513 TFLOPS sparse, so 756.5 dense
    # (exactly half; "756" elsewhere is the same figure truncated), FP8 3,026 sparse = 1,513 dense,
    # FP32 51 TFLOPS; 80 GB HBM2e at 2.0 TB/s (2,000 GB/s). 114 SMs, 50 MB L2 (H100 whitepaper).
    "h100-pcie": GPUSpec("h100-pcie", 756.5e12, 2.0e12, 80, peak_fp8=1513e12, peak_fp32=51e12, sm_count=114,
                         l2_mib=50,
                         source=f"{_H100_DS}, H100 PCIe column (dense = half the printed sparse figure); "
                                "SMs and L2 from the H100 architecture whitepaper (2022)"),
    # NVIDIA HGX platform page / HGX B200 datasheet, "Individual Blackwell GPU specifications", HGX
    # B200 column: FP16/BF16 tensor 4.5 PFLOPS sparse = 2.25 dense, FP8 9 PFLOPS sparse = 4.5 dense,
    # FP32 75 TFLOPS; 180 GB HBM3e at 7.7 TB/s. The launch material said 192 GB and 8 TB/s; the
    # current page prints 180 GB and 7.7 TB/s, which is what a B200 reports (a 7,680-bit bus at
    # 3,996 MHz: 7.67 TB/s), so this preset uses the current figures. SMs (148) and L2 (126.5 MiB)
    # are not in the datasheet: they are the CUDA device properties of a B200 (multiProcessorCount,
    # l2CacheSize), as quoted in pytorch/ao PR #4002 (2026).
    "b200": GPUSpec("b200", 2.25e15, 7.7e12, 180, peak_fp8=4.5e15, peak_fp32=75e12, sm_count=148,
                    l2_mib=126.5,
                    source="NVIDIA HGX platform page / HGX B200 datasheet (current revision), HGX B200 per-GPU column "
                           "(dense = half the printed sparse figure); SMs and L2 from the CUDA device "
                           "properties, not the datasheet"),
    # AMD Instinct MI300X data sheet (2023): peak BF16/FP16 matrix 1,307.4 TFLOPS dense (2,614.9 with
    # sparsity), FP8 2,614.9 dense, FP32 vector 163.4 TFLOPS; 304 CUs; 192 GB HBM3 at 5.3 TB/s.
    # l2_mib holds the 256 MB AMD Infinity Cache, the last-level cache (the L2 proper is 4 MB per
    # XCD, 32 MB in all; ROCm GPU specifications table).
    "mi300x": GPUSpec("mi300x", 1307.4e12, 5.3e12, 192, peak_fp8=2614.9e12, peak_fp32=163.4e12, sm_count=304,
                      l2_mib=256,
                      source="AMD Instinct MI300X data sheet (2023), OAM accelerator; l2_mib is the "
                             "256 MB Infinity Cache (last-level cache), per the ROCm GPU specifications"),
}

# CUDA/ROCm device names (torch.cuda.get_device_name, nvidia-smi --query-gpu=name) of the parts
# above, lower-cased. Only names that identify one preset's configuration: "NVIDIA H100 NVL",
# "NVIDIA H200 NVL" and "NVIDIA GH200 144G HBM3e" are other parts and stay unknown.
_DEVICE_NAMES: dict[str, str] = {
    "nvidia a100-sxm4-40gb": "a100-sxm4-40gb",
    "nvidia a100-sxm4-80gb": "a100-sxm4-80gb",
    "nvidia a100 80gb pcie": "a100-pcie-80gb",
    "nvidia h100 80gb hbm3": "h100-sxm",
    "nvidia h100 pcie": "h100-pcie",
    "nvidia h200": "h200",
    "nvidia gh200 480gb": "gh200",  # the 96 GB HBM3 + 480 GB LPDDR5X superchip
    "nvidia b200": "b200",
    "amd instinct mi300x": "mi300x",
}


def gpu_for_device_name(name: str) -> str | None:
    """The :data:`GPU_PRESETS` key of a device name as torch reports it (``"NVIDIA H100 80GB
    HBM3"`` -> ``"h100-sxm"``), or None for a GPU with no preset. Case and runs of spaces are
    ignored; nothing else is guessed (``"NVIDIA H100 NVL"`` is None, not ``h100-sxm``)."""
    if not isinstance(name, str):
        return None
    return _DEVICE_NAMES.get(" ".join(name.split()).casefold())


def get_gpu(name: str, field: str = "cluster.gpu") -> GPUSpec:
    try:
        return GPU_PRESETS[str(name).lower()]
    except KeyError:
        known = ", ".join(sorted(GPU_PRESETS))
        raise ConfigError(field, f"unknown GPU preset {name!r}; known: {known}") from None
