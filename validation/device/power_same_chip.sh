#!/usr/bin/env bash
# Device batch (one GPU, ~8 min): the power probe's GEMM:copy curve and training's sustained slowdown on
# the SAME chip, so that the two can be compared without the spread between GPUs.
# 1. validation/probe_gpu_spread.py: the bf16 8192-cube GEMM, its mixes with 1-16 copies and the copy
#    alone, one round, 10 s of load each ($R/spread.jsonl; `python -m trainsim.calibration.power_cap` fits it);
# 2. validation/probe_throttle_onset.py --pairs: six drawn shapes beyond the paper box (configs_broad_hf2.csv)
#    and two inside it (configs.csv), each burst after idle gaps then 16 s back to back ($R/onset.jsonl).
# PAIRS=<names> overrides the configurations. The probe tables last.
set -u
. validation/device/gpu_workdir.sh power_same_chip
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout 200 python3 validation/probe_gpu_spread.py --gpus 1 --rounds 1 --sustain-s 10 \
  --kernels gemm_bf16_8192,mix_bf16_c1,mix_bf16_c2,mix_bf16_c4,mix_bf16_c8,mix_bf16_c16,copy_256mib \
  --out "$R/spread.jsonl" > "$R/spread.txt" 2>&1
echo "spread done at $(( $(date +%s) - t0 )) s"
timeout $(( DEADLINE - $(date +%s) + t0 - 10 )) python3 validation/probe_throttle_onset.py --out "$R/onset.jsonl" \
  --pairs "${PAIRS:-b03,b06,b08,b01,b09,b10,c09,c01}" --cool-s 4 \
  --config-csv validation/configs_broad_hf2.csv,validation/configs.csv
tail -20 "$R/spread.txt"
echo "total $(( $(date +%s) - t0 )) s"
