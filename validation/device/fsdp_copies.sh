#!/usr/bin/env bash
# Device batch: validation/probe_fsdp_copies.py on one GPU (FSDP2's copy kernels against the gradient
# accumulation's add, per hidden size and world size). Rows to $OUT/fsdp_copies.jsonl; the probe prints
# one line per row. About 40 s on an H100.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus_copies.csv" 2>/dev/null
start=$(date +%s)
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} python3 validation/probe_fsdp_copies.py --out "$OUT/fsdp_copies.jsonl"
echo "elapsed $(( $(date +%s) - start )) s"
