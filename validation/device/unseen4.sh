#!/usr/bin/env bash
# Device batch (one H100 or H200): the fourth unseen single-GPU set (validation/configs_unseen4.csv,
# drawn by validation/draw_configs.py --seed 20261127 before any was measured), HF GPT-NeoX trained by
# validation/train_gptneox.py, 8 timed iterations after 3 warm-up. $OUT/measured_unseen4_<gpu>.csv.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $NAME"
case "$NAME" in *H200*) G=h200 ;; *) G=h100 ;; esac
timeout 330 python3 validation/train_gptneox.py --configs validation/configs_unseen4.csv --time-budget 300 \
  --out "$R/measured_unseen4_$G.csv" > "$R/train_unseen4_$G.log" 2>&1
tail -3 "$R/train_unseen4_$G.log"
cut -d, -f1,10,11,16 "$R/measured_unseen4_$G.csv"
echo "total $(( $(date +%s) - t0 )) s"
