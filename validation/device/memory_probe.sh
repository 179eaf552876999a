#!/usr/bin/env bash
# Device batch (2 GPUs): validation/probe_memory.py — each rank's peak and resting memory of pp2 and tp2 on
# shapes that vary one size at a time (validation/hf_parallel_shapes_memory.csv); $OUT/memory_probe.jsonl.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; J=/tmp/memory_probe.jsonl; t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0,1 timeout ${BUDGET_S:-400} python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
  validation/probe_memory.py --layouts ${LAYOUTS:-pp2,tp2} --shapes validation/hf_parallel_shapes_memory.csv \
  --out $J > /tmp/memory_probe.log 2>&1
cp $J "$R/memory_probe.jsonl"; cp /tmp/memory_probe.log "$R/memory_probe.log"
grep -hE "Error|peak" /tmp/memory_probe.log | tail -30
echo "total $(( $(date +%s) - t0 )) s"
