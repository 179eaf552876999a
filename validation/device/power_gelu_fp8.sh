#!/usr/bin/env bash
# Device batch (one GPU, ~2 min): the power probe's GELU mixes with the FP8 GEMM (the 8192-cube
# torch._scaled_mm), where only copy mixes were measured (docs/efficiency.md): the FP8 and bf16 GEMMs alone,
# the GELU alone, FP8 mixes with 2, 8 and 32 GELUs (D ~0.6 to 0.1) and the bf16 mix with 8 as this chip's
# check against the bf16 GELU level; 6 s of load each. $OUT/spread.jsonl; the probe's table last.
KERNELS=gemm_fp8_8192,gemm_bf16_8192,gelu_256mib,mix_fp8_e2,mix_fp8_e8,mix_fp8_e32,mix_bf16_e8 \
  exec bash validation/device/power_low_share.sh power_gelu_fp8
