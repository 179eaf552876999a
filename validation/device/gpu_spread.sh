#!/usr/bin/env bash
# Device batch: validation/probe_gpu_spread.py on every GPU of the host at once (the GPUs' speed spread
# on the same work, burst and sustained; ~3 min). $OUT/spread.jsonl, nvidia-smi's view; a table last.
# ROUNDS=2, SUSTAIN_S=12, KERNELS=<comma list> (default: the probe's five; mix_<bf16|fp8>_c<N> for GEMM:copy mixes).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$OUT/gpus.csv"
lscpu | head -20 > "$OUT/cpu.txt"
timeout 500 python3 validation/probe_gpu_spread.py --gpus "$N" --rounds "${ROUNDS:-2}" ${KERNELS:+--kernels "$KERNELS"} --out "$OUT/spread.jsonl"
