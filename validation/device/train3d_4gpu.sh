#!/usr/bin/env bash
# Device batch: validation/train_3d.py for the layouts in LAYOUTS (default: every pp*mp*dp = 4) on a host,
# plus one-GPU runs of the same shapes on the same machine. Appends rows to $WORK/measured.csv
# (resumable: a (layout, shape) already there is skipped), copies it to $OUT, prints a table.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; WORK=${WORK:-/tmp/train3d4}; CSV="$WORK/measured.csv"
mkdir -p "$OUT" "$WORK"
SHAPES=${SHAPES:-"2048:16:8:2048:2:8 4096:32:8:2048:1:8"}   # hidden:heads:layers:seq:micro_batch:micro_batches
LAYOUTS=${LAYOUTS:-"1-1-1 1-1-4 1-2-2 1-4-1 2-1-2 2-2-1 4-1-1"}
deadline=$(( $(date +%s) + ${BUDGET_S:-500} ))
for shape in $SHAPES; do IFS=: read -r d h L s b m <<<"$shape"
  for lay in $LAYOUTS; do IFS=- read -r pp mp dp <<<"$lay"
    key="pp${pp}-mp${mp}-dp${dp},$pp,$mp,$dp,$d,$h,$L,$s,$b,$m,"
    if [ -f "$CSV" ] && grep -q "^$key" "$CSV"; then continue; fi
    if [ "$(date +%s)" -gt "$deadline" ]; then echo "budget reached before $lay $shape"; break 2; fi
    n=$((pp * mp * dp))
    timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node $n validation/train_3d.py \
      --pp $pp --mp $mp --dp $dp --hidden $d --heads $h --layers $L --seq $s --micro-batch $b \
      --micro-batches $m --iters 8 --warmup 3 --dtype bf16 --out "$CSV" > "$WORK/log-$lay-$d.txt" 2>&1 \
      || { echo "FAILED $lay $shape"; tail -5 "$WORK/log-$lay-$d.txt"; }
    cp "$CSV" "$OUT/measured_3d.csv" 2>/dev/null  # what is measured comes back even if the call is cut
  done
done
cp "$CSV" "$OUT/measured_3d.csv" 2>/dev/null
nvidia-smi --query-gpu=index,name --format=csv > "$OUT/gpus.csv"
cut -d, -f1-14 "$CSV"
