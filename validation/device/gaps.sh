#!/usr/bin/env bash
# Device batch (2 GPUs): validation/probe_gaps.py — the GPU's idle gaps in one profiled iteration of 1gpu,
# dp2 and tp2 at d2048-L8 and what the host did meanwhile; $OUT/gaps.jsonl and the raw traces (gzip).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 validation/probe_gaps.py --layouts 1gpu --shape ${SHAPE:-d2048-L8} \
  --out "$R/gaps.jsonl" > /tmp/gaps1.log 2>&1
CUDA_VISIBLE_DEVICES=0,1 timeout 250 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
  validation/probe_gaps.py --layouts dp2,fsdp2 --shape ${SHAPE:-d2048-L8} --out "$R/gaps.jsonl" > /tmp/gaps2.log 2>&1
grep -hvE "^W1|Warning|warn" /tmp/gaps1.log /tmp/gaps2.log | grep -E "gap|min |Error" | head -60
ls -la "$R"; echo "total $(( $(date +%s) - t0 )) s"
