#!/usr/bin/env bash
# Device batch (a 2- or 4-GPU host; the 4-GPU layouts where there are four): every train_hf_parallel.py layout of 1, 2 and 4 GPUs on the tiny shapes
# (validation/hf_parallel_shapes_host.csv: the runtimes' host cost) — one more machine for the host fit.
# Rows come back as $OUT/host2.csv and $OUT/host4.csv.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0,1 OUT=$R/h2 WORK=/tmp/host2 NPROC=2 LAYOUTS=dp2,tp2,pp2,fsdp2 \
  SHAPES=validation/hf_parallel_shapes_host.csv BUDGET_S=110 bash validation/device/hf_parallel.sh > /tmp/host2.log 2>&1
[ "$(nvidia-smi -L | wc -l)" -ge 4 ] && OUT=$R/h4 WORK=/tmp/host4 NPROC=4 SHAPES=validation/hf_parallel_shapes_host.csv BUDGET_S=130 \
  bash validation/device/hf_parallel.sh > /tmp/host4.log 2>&1
cp /tmp/host2/measured.csv "$R/host2.csv"; cp /tmp/host4/measured.csv "$R/host4.csv" 2>/dev/null
tail -22 /tmp/host2.log; tail -28 /tmp/host4.log 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
