#!/usr/bin/env bash
# Device batch (one GPU): validation/probe_throttle_onset.py, the time course of the GPU's speed from
# idle through 90 s of GEMMs and 45 s of each single-GPU training configuration (about 4.5 min); PAIRS=<names>: each configuration burst (iterations after idle gaps) then sustained;
# PROFILE_PAIRS=<names>: one profiled iteration of each from a cool GPU and one after SUSTAIN_S of load (COOL_S between).
# $OUT/onset.jsonl, nvidia-smi's view of the GPU and the host; the probe's table last.
set -u
. validation/device/gpu_workdir.sh throttle_onset
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout $(( DEADLINE - 10 )) python3 validation/probe_throttle_onset.py --out "$R/onset.jsonl" \
  ${GEMM_S:+--gemm-s "$GEMM_S"} ${TRAIN_S:+--train-s "$TRAIN_S"} ${CONFIGS:+--configs "$CONFIGS"} ${PAIRS:+--pairs "$PAIRS" --cool-s 5} \
  ${PROFILE_PAIRS:+--profile-pairs "$PROFILE_PAIRS"} ${SUSTAIN_S:+--sustain-s "$SUSTAIN_S"} ${COOL_S:+--cool-s "$COOL_S"} \
  --config-csv validation/configs.csv,validation/configs_unseen.csv,validation/configs_unseen2.csv,validation/configs_unseen3.csv,validation/configs_unseen4.csv
echo "total $(( $(date +%s) - t0 )) s"
