#!/usr/bin/env bash
# Device batch (2 GPUs): probe_host_split.py --alternate — tiny and real shapes built side by side in one
# process and measured in turn, 6 rounds: is the real shapes' larger host issue time systematic or noise?
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; J=/tmp/alt.jsonl; t0=$(date +%s)
SH=validation/hf_parallel_shapes_host.csv,validation/hf_parallel_shapes.csv,validation/hf_parallel_shapes_heldout.csv
CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
  validation/probe_host_split.py --layouts tp2,fsdp2 --shapes $SH --only host-L8-m4,d2048-L8,d3072-L8 \
  --alternate 6 --out $J > /tmp/alt2.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 validation/probe_host_split.py --layouts 1gpu --shapes $SH \
  --only host-L8-m4,d2048-L8 --alternate 4 --out $J > /tmp/alt1.log 2>&1
cp $J "$R/host_alternate.jsonl"
grep -hE "Error|round " /tmp/alt2.log /tmp/alt1.log | tail -60
echo "total $(( $(date +%s) - t0 )) s"
