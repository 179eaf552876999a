#!/usr/bin/env bash
# Device batch (one GPU): does validation/train_3d.py's load throttle as the power-cap model says?
# Its one-GPU shapes (the committed rows' shapes), each back to back for about SUSTAIN_S seconds
# (3 warm-up iterations, then enough for that long), with the GPU's SM clock, power and temperature
# read every 0.1 s beside it; then one HF configuration (probe_throttle_onset.py --pairs) as the
# control the power-cap curve was fitted on. $OUT/course.jsonl (every iteration: start, seconds),
# $OUT/smi.csv, $OUT/rows.csv (train_3d.py's own rows: min and median of the timed iterations);
# a table last (python validation/train3d_power_table.py). BURSTS=N (default 0): before each shape's load,
# N iterations each after IDLE_S (2) idle seconds, in their own launch ($OUT/burst.jsonl): the shape from
# a cool GPU, as the operator samples are timed. Logs go to $OUT/log.txt (few files come back).
# NPROC=2 LAYOUT="--pp 2": the same on that many GPUs in that layout (rank 0's course); PAIRS="": no HF control.
set -u
. validation/device/gpu_workdir.sh train3d_power
. validation/device/smi_log.sh
SUSTAIN_S=${SUSTAIN_S:-16}
# name hidden heads layers seq micro_batch micro_batches recompute expected-seconds-per-iteration
SHAPES=${SHAPES:-"A:2048:16:8:2048:2:8:none:0.23 B:4096:32:8:2048:1:8:none:0.37 D:4096:32:12:2048:1:8:none:0.52 \
E:1024:16:12:4096:2:4:full:0.18 F:3072:24:6:1024:8:2:full:0.20 G:6144:48:2:2048:4:4:none:0.44 H:4096:32:4:2048:2:8:none:0.39"}
t3d() {  # train_3d.py on one GPU at the current shape; extra arguments follow
  timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "${NPROC:-1}" validation/train_3d.py \
    ${LAYOUT:-} --hidden "$d" \
    --heads "$h" --layers "$L" --seq "$seq" --micro-batch "$b" --micro-batches "$m" $extra --warmup 3 --dtype bf16 "$@" \
    >> "$R/log.txt" 2>&1
}
for s in $SHAPES; do IFS=: read -r name d h L seq b m rc per <<<"$s"
  grep -q "\"name\": \"$name\"" "$W/done.txt" 2>/dev/null && continue
  (( $(date +%s) - t0 > DEADLINE - 60 )) && { echo "deadline: stop before $name"; break; }
  iters=$(python3 -c "import math; print(max(12, math.ceil($SUSTAIN_S / $per)))")
  extra=""; [ "$rc" = full ] && extra="--recompute"
  sleep 8  # the GPU cools between shapes, as between the committed launches
  if (( ${BURSTS:-0} > 0 )); then
    t3d --iters "$BURSTS" --idle-s "${IDLE_S:-2}" --course "$R/burst.jsonl" || echo "FAILED burst $name"
    sleep 4
  fi
  t3d --iters "$iters" --out "$R/rows.csv" --course "$R/course.jsonl" \
    && echo "{\"name\": \"$name\"}" >> "$W/done.txt" || { echo "FAILED $name"; tail -3 "$R/log.txt"; }
  tail -1 "$R/log.txt"
done
if [ -n "${PAIRS-c09}" ] && (( $(date +%s) - t0 < DEADLINE - 70 )); then
  sleep 8
  timeout 120 python3 validation/probe_throttle_onset.py --out "$R/onset.jsonl" --pairs "${PAIRS-c09}" --cool-s 2 \
    --config-csv validation/configs.csv >> "$R/log.txt" 2>&1 || echo "FAILED pairs"
fi
kill $SMI 2>/dev/null
python3 validation/train3d_power_table.py "$R"
echo "total $(( $(date +%s) - t0 )) s"
