#!/usr/bin/env bash
# Device batch (a 4-GPU host): validation/concurrent_collectives.py — TP and DP pairs alone and at once.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 4 validation/concurrent_collectives.py \
  --out "$R/concurrent.jsonl" > /tmp/conc.log 2>&1; echo "exit $?"
grep -E "^\{|Error" /tmp/conc.log | tail -24
nvidia-smi topo -m > "$R/topo.txt" 2>&1
echo "total $(( $(date +%s) - t0 )) s"
