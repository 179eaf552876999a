#!/usr/bin/env bash
# Device batch (a 4-GPU host): train_3d.py's host (CPU) cost, and its real runs on the same machine.
# STEP=tiny: every layout of 1, 2 and 4 GPUs on a tiny shape (hidden 256, seq 128, b 1), at two depths,
# each launch timing micro-batch counts 2, 4 and 8 in turn (--sweep-micro-batches): the GPU work is
# negligible there, so an iteration's time is the host's issue time (validation/fit_host_3d.py fits it).
# STEP=real: validation/device/train3d_4gpu.sh (every pp*mp*dp = 4 at its two real shapes) into the
# same $WORK. Resumable: a (layout, depth) already in $WORK/tiny.csv is skipped.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; WORK=${WORK:-/tmp/train3dhost}; mkdir -p "$OUT" "$WORK"
t0=$(date +%s); deadline=$(( t0 + ${BUDGET_S:-540} ))
if [ "${STEP:-tiny}" = tiny ]; then
  CSV="$WORK/tiny.csv"
  for lay in ${LAYOUTS:-"1-1-1 1-2-1 1-4-1 1-1-2 1-1-4 1-2-2 2-1-1 2-1-2 2-2-1 4-1-1"}; do
    IFS=- read -r pp mp dp <<<"$lay"; n=$((pp * mp * dp))
    depths="4 16"; [ "$pp" = 4 ] && depths="12 20"
    for L in $depths; do
      key="pp${pp}-mp${mp}-dp${dp},$pp,$mp,$dp,256,8,$L,"
      if [ -f "$CSV" ] && grep -q "^$key" "$CSV"; then continue; fi
      if [ "$(date +%s)" -gt "$deadline" ]; then echo "budget reached before $lay L$L"; break 2; fi
      timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node $n validation/train_3d.py \
        --pp $pp --mp $mp --dp $dp --hidden 256 --heads 8 --layers $L --seq 128 --micro-batch 1 \
        --sweep-micro-batches 2,4,8 --iters 6 --warmup 2 --dtype bf16 --out "$CSV" > "$WORK/log-tiny-$lay-$L.txt" 2>&1 \
        || { echo "FAILED $lay L$L"; tail -5 "$WORK/log-tiny-$lay-$L.txt"; }
      cp "$CSV" "$OUT/tiny.csv" 2>/dev/null
    done
  done
  cut -d, -f1,7,10,12,13,15 "$CSV" | column -ts,
else
  OUT=$OUT WORK=$WORK BUDGET_S=$(( deadline - t0 )) bash validation/device/train3d_4gpu.sh
fi
lscpu | grep -E "Model name|^CPU\(s\)" > "$OUT/cpu.txt"; nvidia-smi --query-gpu=index,name,clocks.max.sm --format=csv >> "$OUT/cpu.txt"
echo "step ${STEP:-tiny}: $(( $(date +%s) - t0 )) s"
