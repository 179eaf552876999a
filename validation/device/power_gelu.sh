#!/usr/bin/env bash
# Device batch (one GPU, ~4 min): the power probe's curve with an elementwise filler (GELU) beside the copy
# one, on the same chip: the 8192-cube bf16 GEMM, its mixes with 1-16 copies and with 1-16 GELUs, the copy
# and the GELU alone; one round, 10 s of load each. $OUT/spread.jsonl; the probe's table last.
set -u
. validation/device/gpu_workdir.sh power_gelu
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout $(( DEADLINE - 10 )) python3 validation/probe_gpu_spread.py --gpus 1 --rounds 1 --sustain-s 10 \
  --kernels gemm_bf16_8192,copy_256mib,gelu_256mib,mix_bf16_c1,mix_bf16_e1,mix_bf16_c2,mix_bf16_e2,mix_bf16_c4,mix_bf16_e4,mix_bf16_c8,mix_bf16_e8,mix_bf16_c16,mix_bf16_e16 \
  --out "$R/spread.jsonl"
echo "total $(( $(date +%s) - t0 )) s"
