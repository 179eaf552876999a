#!/usr/bin/env bash
# Device batch (a 2-GPU host): validation/probe_parallel_head_host.py, the host time of a micro-batch's
# head and tail in layers, for the eager runtime (1gpu, one process) and DTensor TP (tp2, torchrun), at
# the tiny host shapes; then, on the same machine, train_hf_parallel.py's 1gpu and tp2 rows at the tiny
# host shapes and at the GPU-bound shapes (the rows the head and tail are checked against).
# Lines to $OUT/parallel_head_host.jsonl (resumable by hand: delete it to re-run); rows to $OUT/host/ and
# $OUT/gpu_bound/. About 4 minutes on two H200s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
J="$R/parallel_head_host.jsonl"
lscpu > "$R/cpu.txt" 2>/dev/null
if [ "${SKIP_PROBE:-0}" != 1 ]; then
  timeout 150 python3 validation/probe_parallel_head_host.py --layouts 1gpu --out "$J" 2>&1 | grep -v "^\*\|OMP_NUM"
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 2 validation/probe_parallel_head_host.py \
    --layouts tp2 --out "$J" 2>&1 | grep -v "^\*\|OMP_NUM\|^W1"
fi
echo "probe $(( $(date +%s) - t0 )) s"
OUT=$R/host WORK=/tmp/phh_host NPROC=2 LAYOUTS=tp2 SHAPES=validation/hf_parallel_shapes_host.csv BUDGET_S=90 \
  bash validation/device/hf_parallel.sh > /tmp/phh_host.log 2>&1
OUT=$R/gpu_bound WORK=/tmp/phh_gb NPROC=2 LAYOUTS=tp2 SHAPES=validation/hf_parallel_shapes_gpu_bound.csv BUDGET_S=120 \
  bash validation/device/hf_parallel.sh > /tmp/phh_gb.log 2>&1
tail -10 /tmp/phh_host.log; tail -10 /tmp/phh_gb.log
echo "total $(( $(date +%s) - t0 )) s"
