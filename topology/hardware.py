"""GPU hardware figures used by the roofline fallback and the memory check.

Figures are the vendors' datasheet numbers for *dense* FP16/BF16 tensor-core
throughput (the datasheets print the 2:4-sparsity figure, twice as large, next to
it), HBM bandwidth and capacity. They are peaks: measured kernels reach a fraction.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.operators.errors import ConfigError, require_positive


@dataclass(frozen=True)
class GPUSpec:
    name: str
    peak_flops: float  # dense fp16/bf16 tensor-core FLOP/s
    mem_bw: float  # HBM bytes/s
    mem_gib: float  # HBM capacity as the datasheet states it (GB there; treated as GiB for headroom checks)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("cluster.gpu", "GPU name must not be empty")
        require_positive("cluster.gpu.peak_flops", self.peak_flops)
        require_positive("cluster.gpu.mem_bw", self.mem_bw)
        require_positive("cluster.gpu.mem_gib", self.mem_gib)


GPU_PRESETS: dict[str, GPUSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column: FP16/BF16 tensor 312 TFLOPS
    # (624 sparse); 80 GB HBM2e at 2,039 GB/s. The reference samples were taken on this part.
    "a100-sxm4-80gb": GPUSpec("a100-sxm4-80gb", 312e12, 2.039e12, 80),
    # Same datasheet, 40 GB SXM: 1,555 GB/s HBM2 (most of Perlmutter's GPU nodes).
    "a100-sxm4-40gb": GPUSpec("a100-sxm4-40gb", 312e12, 1.555e12, 40),
    # NVIDIA GH200 Grace Hopper Superchip datasheet: H100 die, FP16 tensor 989 TFLOPS dense
    # (1,979 sparse); 96 GB HBM3 at 4 TB/s (the variant in TACC Vista).
    "gh200": GPUSpec("gh200", 989e12, 4.0e12, 96),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column: FP16/BF16 tensor 989 TFLOPS dense
    # (1,979 sparse); 80 GB HBM3 at 3.35 TB/s.
    "h100-sxm": GPUSpec("h100-sxm", 989e12, 3.35e12, 80),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM column: same compute as H100 SXM;
    # 141 GB HBM3e at 4.8 TB/s.
    "h200": GPUSpec("h200", 989e12, 4.8e12, 141),
}


def get_gpu(name: str, field: str = "cluster.gpu") -> GPUSpec:
    try:
        return GPU_PRESETS[str(name).lower()]
    except KeyError:
        known = ", ".join(sorted(GPU_PRESETS))
        raise ConfigError(field, f"unknown GPU preset {name!r}; known: {known}") from None
