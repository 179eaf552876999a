#!/usr/bin/env bash
# Device batch (one GPU): the two single-GPU trainers' host cost side by side on one machine. The tiny
# host shapes (validation/configs_host_tiny.csv = validation/hf_parallel_shapes_host.csv, no recompute)
# by validation/train_gptneox.py and by validation/train_hf_parallel.py's 1gpu layout, in turn, ROUNDS
# times (default 3). To $OUT: gptneox_round<r>.csv, hf_round<r>.csv, their logs, gpus.csv, cpu.txt;
# a table last. About 40 s a round on an H200.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpus.csv" 2>/dev/null
lscpu > "$R/cpu.txt" 2>/dev/null
for r in $(seq 1 "${ROUNDS:-3}"); do
  python3 validation/train_gptneox.py --configs validation/configs_host_tiny.csv --out "$R/gptneox_round$r.csv" \
    > "$R/gptneox_round$r.log" 2>&1
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/train_hf_parallel.py --layouts 1gpu \
    --shapes validation/hf_parallel_shapes_host.csv --out "$R/hf_round$r.csv" > "$R/hf_round$r.log" 2>&1
done
for r in $(seq 1 "${ROUNDS:-3}"); do
  echo "round $r: train_gptneox.py"; cut -d, -f1,2,3 "$R/gptneox_round$r.csv"
  echo "round $r: train_hf_parallel.py 1gpu"; cut -d, -f8,18,19 "$R/hf_round$r.csv"
done
echo "total $(( $(date +%s) - t0 )) s"
