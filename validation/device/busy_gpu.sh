#!/usr/bin/env bash
# Device batch (2+ GPUs): validation/probe_busy_gpu.py — host issue time of tiny-shape steps with the GPU
# idle and with a side stream busy; rows come back as $OUT/busy_gpu.jsonl.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; J=/tmp/busy.jsonl; t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 validation/probe_busy_gpu.py --layouts 1gpu \
  --shapes validation/hf_parallel_shapes_host.csv --only host-L8-m4 --out $J > /tmp/busy1.log 2>&1
CUDA_VISIBLE_DEVICES=0,1 timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
  validation/probe_busy_gpu.py --layouts tp2,fsdp2,dp2 --shapes validation/hf_parallel_shapes_host.csv \
  --only host-L8-m4 --out $J > /tmp/busy2.log 2>&1
cp $J "$R/busy_gpu.jsonl"
grep -hE "Error|iter " /tmp/busy1.log /tmp/busy2.log | tail -30
echo "total $(( $(date +%s) - t0 )) s"
