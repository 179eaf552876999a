#!/usr/bin/env bash
# Device batch: one profiled iteration (train_3d.py --kernels) of mp2 and of one GPU at d2048-L8-b2,
# m 8, on the first GPUs of a host: the GPU's busy time and kernel seconds by category against the
# wall. $OUT/kernels.jsonl and $OUT/rows.csv; a table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
ARGS="--hidden 2048 --heads 16 --layers 8 --seq 2048 --micro-batch 2 --micro-batches 8 --iters 6 --warmup 3 --dtype bf16"
LAYOUTS=${LAYOUTS:-"1-2-1 1-1-1"}
for lay in $LAYOUTS; do IFS=- read -r pp mp dp <<<"$lay"
  timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node $((pp * mp * dp)) validation/train_3d.py \
    --pp $pp --mp $mp --dp $dp $ARGS --out "$OUT/rows.csv" --kernels "$OUT/kernels.jsonl" > "$OUT/log-$lay.txt" 2>&1 \
    || { echo "FAILED $lay"; tail -5 "$OUT/log-$lay.txt"; }
done
nvidia-smi --query-gpu=index,name --format=csv > "$OUT/gpus.csv"
python3 -c "
import json
for l in open('$OUT/kernels.jsonl'):
    d=json.loads(l); print(d['layout'], 'wall %.4f busy %.4f compute %.4f gemm %.4f attn %.4f elem %.4f allreduce %.4f kernels %d' % (
        d['wall_s'], d['busy_s'], d['compute_busy_s'], d['gemm_s'], d['attention_s'], d['elementwise_other_s'], d['nccl_all_reduce_s'], d['kernels']))
"
