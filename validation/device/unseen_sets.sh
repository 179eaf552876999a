#!/usr/bin/env bash
# Device batch (one H100 or H200): single-GPU unseen sets, HF GPT-NeoX trained by validation/train_gptneox.py
# (8 timed iterations after 3 warm-up), one after another on the same machine. SETS="unseen5 unseen4" names
# validation/configs_<set>.csv; each to $OUT/measured_<set>_<gpu>.csv with its log. A table last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $NAME"
case "$NAME" in *H200*) G=h200 ;; *) G=h100 ;; esac
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv > "$R/gpus.csv" 2>/dev/null
lscpu > "$R/cpu.txt" 2>/dev/null
for s in ${SETS:-unseen5}; do
  left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
  [ "$left" -lt 40 ] && { echo "budget reached before $s"; break; }
  timeout "$left" python3 validation/train_gptneox.py --configs "validation/configs_$s.csv" --time-budget $(( left - 20 )) \
    --out "$R/measured_${s}_$G.csv" > "$R/train_${s}_$G.log" 2>&1
  tail -2 "$R/train_${s}_$G.log"
  cut -d, -f1,10,11,16 "$R/measured_${s}_$G.csv"
done
echo "total $(( $(date +%s) - t0 )) s"
