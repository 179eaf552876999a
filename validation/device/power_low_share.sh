#!/usr/bin/env bash
# Device batch (one GPU, ~2 min): the power probe's copy and GELU mixes at low tensor-core shares (32 and 64
# fillers after the 8192-cube GEMM: D ~0.1-0.25), where the GELU curve had no point (docs/efficiency.md);
# 6 s of load each. $OUT/spread.jsonl; the probe's table last. KERNELS (and the work folder's name, $1)
# replace the kernels: validation/device/power_gelu_fp8.sh runs the FP8 GELU mixes so.
set -u
. validation/device/gpu_workdir.sh "${1:-power_low_share}"
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
timeout $(( DEADLINE - 10 )) python3 validation/probe_gpu_spread.py --gpus 1 --rounds 1 --sustain-s 6 --idle-s 2 \
  --kernels "${KERNELS:-gemm_bf16_8192,copy_256mib,gelu_256mib,mix_bf16_e32,mix_bf16_e64,mix_bf16_c32,mix_bf16_c64}" \
  --out "$R/spread.jsonl"
echo "total $(( $(date +%s) - t0 )) s"
