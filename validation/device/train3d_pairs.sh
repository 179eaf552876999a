#!/usr/bin/env bash
# Device batch (a 4-GPU host): is mp2-dp2's excess over mp2 the DP group or the two TP pairs at once?
# At one real shape (d2048-L8-b2, m 8): (a) mp2-dp1 on GPUs 0,1 alone; (b) mp2-dp2 on all four;
# (c) two independent mp2-dp1 jobs at once, on GPUs 0,1 and 2,3 (two TP pairs, no DP group);
# (d) mp1-dp2 on GPUs 0,1. Rows in $OUT/pairs.csv (a "case" column), a table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; W=${WORK:-/tmp/pairs}; mkdir -p "$OUT" "$W"
ARGS="--hidden 2048 --heads 16 --layers 8 --seq 2048 --micro-batch 2 --micro-batches 8 --iters 8 --warmup 3 --dtype bf16"
run() {  # case gpus port pp mp dp
  CUDA_VISIBLE_DEVICES=$2 timeout 200 python3 -m torch.distributed.run --standalone --master-port $3 \
    --nproc-per-node $(( $4 * $5 * $6 )) validation/train_3d.py --pp $4 --mp $5 --dp $6 $ARGS \
    --out "$W/$1.csv" > "$W/log-$1.txt" 2>&1 || { echo "FAILED $1"; tail -3 "$W/log-$1.txt"; }
}
run a_mp2 0,1 29511 1 2 1
run b_mp2dp2 0,1,2,3 29512 1 2 2
run c_pair01 0,1 29513 1 2 1 & run c_pair23 2,3 29514 1 2 1 & wait
run d_dp2 0,1 29515 1 1 2
run a_mp2_again 0,1 29516 1 2 1
{ echo "case,$(head -1 "$W/a_mp2.csv")"; for f in "$W"/*.csv; do c=$(basename "$f" .csv); tail -n +2 "$f" | sed "s/^/$c,/"; done; } > "$OUT/pairs.csv"
nvidia-smi --query-gpu=index,name --format=csv > "$OUT/gpus.csv"
cut -d, -f1,2,13,14 "$OUT/pairs.csv"
