#!/usr/bin/env bash
# Device batch (one GPU, ~8 min, resumable): where a training step's own kernels sit between the power probe's
# copy and GELU fillers (validation/probe_power_class.py): the references, then each kind alone and after the
# 8192-cube GEMM, 8 s of load each. $OUT/power_class.jsonl; the analysis last.
set -u
. validation/device/gpu_workdir.sh power_class
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout $(( DEADLINE - 10 )) python3 validation/probe_power_class.py --out "$W/power_class.jsonl"
cp "$W/power_class.jsonl" "$R/"
python3 validation/probe_power_class.py --analyse "$R/power_class.jsonl" 2>&1 | tail -20
echo "total $(( $(date +%s) - t0 )) s"
