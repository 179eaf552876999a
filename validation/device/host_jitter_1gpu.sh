#!/usr/bin/env bash
# Device batch (one GPU): how much the eager runtime's host time wanders from micro-batch to micro-batch.
# validation/probe_tp_host_pace.py with the 1gpu layout (one process) at the tiny host shapes, the
# balanced shapes (host and GPU time about equal on an H200: validation/hf_parallel_shapes_balanced.csv)
# and the GPU-bound shapes, ITERS timed iterations each; then train_hf_parallel.py's own 1gpu rows at the
# tiny and the balanced shapes on the same machine. To $OUT: tp_host_pace.jsonl, host.csv, balanced.csv,
# gpus.csv, cpu.txt. About 150 s on one H200.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"; t0=$(date +%s)
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus.csv" 2>/dev/null
lscpu > "$OUT/cpu.txt" 2>/dev/null
for shapes in validation/hf_parallel_shapes_host.csv validation/hf_parallel_shapes_balanced.csv validation/hf_parallel_shapes_gpu_bound.csv; do
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/probe_tp_host_pace.py \
    --shapes "$shapes" --layout 1gpu --iters "${ITERS:-20}" --out "$OUT/tp_host_pace.jsonl" 2>&1 | grep -v "^\*\|OMP_NUM_THREADS"
done
echo "probe $(( $(date +%s) - t0 )) s"
for s in host balanced; do
  OUT=/tmp/hj_out_$s WORK=/tmp/hj_$s NPROC=1 LAYOUTS=1gpu SHAPES=validation/hf_parallel_shapes_$s.csv BUDGET_S=100 \
    bash validation/device/hf_parallel.sh > /tmp/hj_$s.log 2>&1
  cp /tmp/hj_$s/measured.csv "$OUT/$s.csv"; tail -7 /tmp/hj_$s.log
done
python3 validation/probe_tp_host_pace.py --summarize "$OUT/tp_host_pace.jsonl"
echo "total $(( $(date +%s) - t0 )) s"
