#!/usr/bin/env bash
# Device batch (one GPU, ~2 min): validation/probe_sample_onset.py, whether the harness's samples of long
# tensor-core kernels already carry part of the power cap. $OUT/sample_onset.jsonl; its lines last.
set -u
. validation/device/gpu_workdir.sh sample_onset
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout $(( DEADLINE - 10 )) python3 validation/probe_sample_onset.py --out "$R/sample_onset.jsonl"
echo "total $(( $(date +%s) - t0 )) s"
