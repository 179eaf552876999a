#!/usr/bin/env bash
# Device batch (2 GPUs): validation/probe_memory_timeline.py — one process per (layout, shape): where each
# rank's memory peaks in an iteration and what is allocated there; $OUT/memory_timeline.jsonl.
# RUNS: "layout:shape ..." (default below; 1gpu runs on one GPU). SNAP="TAG#K": also list the largest
# live allocations and their frames at that event (e.g. SNAP="F> lm_head#2").
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; J=$R/memory_timeline.jsonl; t0=$(date +%s)
RUNS=${RUNS:-"pp2:d2048-L8-m2 pp2:d2048-L8 pp2:d2048-L8-b4 pp2:d2048-L16 1gpu:d2048-L8 tp2:d2048-L8 pp2:d1024-L8"}
for run in $RUNS; do
  layout=${run%%:*}; shape=${run#*:}; n=2; [ "$layout" = 1gpu ] && n=1
  if [ $(( $(date +%s) - t0 )) -gt ${BUDGET_S:-420} ]; then echo "skip $run: budget"; continue; fi
  CUDA_VISIBLE_DEVICES=0,1 timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node $n \
    validation/probe_memory_timeline.py --layout $layout --shapes validation/hf_parallel_shapes_memory.csv \
    --shape $shape --out $J ${SNAP:+--snapshot-at "$SNAP"} >> $R/memory_timeline.log 2>&1
  grep -hE "Error|rank [0-9]:" $R/memory_timeline.log | grep "$shape" | tail -2
done
echo "total $(( $(date +%s) - t0 )) s"
