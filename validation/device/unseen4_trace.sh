#!/usr/bin/env bash
# Device batch (one H100 or H200): where the fourth unseen set's GPU-bound rows lose their ~3 %
# (validation/measured_unseen4_*.csv: x01-x09 predicted 2-7 % fast on two H100s and one H200).
#   1. validation/train_hf_parallel.py --layouts 1gpu --kernels on the set's non-recompute shapes
#      (validation/hf_parallel_shapes_unseen4.csv; the same workload as train_gptneox.py): the
#      iteration's minimum and one profiled iteration's kernel time by category and by kernel name
#   2. `trainsim calibrate --gpu-time --ops hf --configs validation/configs_unseen4.csv --budget 237`:
#      the set's exact operators alone (the plan's first 237 rows), to compare with the profile's
#      prices at those shapes. A diagnosis: these samples are not shipped (the set stays unseen).
#   3. the same trainer on validation/hf_parallel_shapes.csv (shapes whose operators were sampled)
# OPS=0 skips step 2. The kernel summaries carry the longest idle gaps (train_hf_parallel.idle_gaps).
# Resumable under $WORK; copied to $OUT/<gpu>. Multicast off.
set -u
. validation/device/gpu_workdir.sh unseen4_trace  # multicast off, $R, $DEADLINE, $t0, $NAME, $G, $W
timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/train_hf_parallel.py \
  --layouts 1gpu --shapes validation/hf_parallel_shapes_unseen4.csv --kernels --out "$W/trained_1gpu.csv" \
  > "$W/train.log" 2>&1
echo "train: exit $? at $(( $(date +%s) - t0 )) s"; tail -9 "$W/train.log"
# the first multi-GPU set's shapes (their operators were sampled) as the control
timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/train_hf_parallel.py \
  --layouts 1gpu --kernels --out "$W/trained_1gpu_control.csv" > "$W/train_control.log" 2>&1
echo "control: exit $? at $(( $(date +%s) - t0 )) s"; tail -4 "$W/train_control.log"
left=$(( DEADLINE - ($(date +%s) - t0) ))
if [ "${OPS:-1}" = 1 ] && [ "$left" -gt 30 ]; then
  timeout $(( left + 30 )) python3 -m trainsim calibrate --out "$W/ops" --gpu-time --ops hf \
    --configs validation/configs_unseen4.csv --budget 237 --seed 0 --time-budget "$left" -q > "$W/ops.log" 2>&1
  echo "ops: exit $? at $(( $(date +%s) - t0 )) s: $(tail -1 "$W/ops.log")"
fi
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > "$W/gpus.csv" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" > "$W/cpu.txt" 2>&1
mkdir -p "$R/$G" && cp -r "$W"/. "$R/$G/"
echo "total $(( $(date +%s) - t0 )) s"
