#!/usr/bin/env bash
# Device batch (one GPU, ~5 min): validation/probe_power_mechanism.py, two rounds of eight kernels that
# differ from the power probe's GEMM:copy mix in one respect each (operands, shape, filler, phase length).
# $OUT/mechanism.jsonl, nvidia-smi's view; the probe's lines last.
set -u
. validation/device/gpu_workdir.sh power_mechanism
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
lscpu | head -20 > "$R/cpu.txt"
timeout $(( DEADLINE - 10 )) python3 validation/probe_power_mechanism.py --out "$R/mechanism.jsonl" --rounds "${ROUNDS:-2}"
echo "total $(( $(date +%s) - t0 )) s"
