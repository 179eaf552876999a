#!/usr/bin/env bash
# Device batch: validation/probe_tp_host_pace.py (each rank's host pace per layer, unprofiled) for LAYOUT
# (default tp2) at the GPU-bound shapes and the machine shapes, NPROC processes. Lines to
# $OUT/tp_host_pace.jsonl; about 90 s for tp2 on two H200s. SHAPES="a.csv b.csv" for other shape files.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
NPROC=${NPROC:-2}; LAYOUT=${LAYOUT:-tp$NPROC}
OUT=${OUT:-out}; mkdir -p "$OUT"
start=$(date +%s)
for shapes in ${SHAPES:-validation/hf_parallel_shapes_gpu_bound.csv validation/hf_parallel_shapes.csv}; do
  timeout 400 python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" validation/probe_tp_host_pace.py \
    --shapes "$shapes" --layout "$LAYOUT" --out "$OUT/tp_host_pace.jsonl" 2>&1 | grep -v "^\*\|OMP_NUM_THREADS"
done
nvidia-smi --query-gpu=index,name --format=csv > "$OUT/gpus.csv" 2>/dev/null
echo "elapsed $(( $(date +%s) - start )) s"
