#!/usr/bin/env bash
# Device batch (one GPU): when does the power cap set in inside train_3d.py's own iterations, and what is
# each kernel's cool duration? Per one-GPU shape (the committed rows' shapes): PROFILE_S (2) seconds of
# iterations profiled back to back after 2 s idle (train_3d.py --profile-iters K --idle-s 2 --timeline):
# the first milliseconds run on a cool GPU, the last iterations under the cap. $OUT/timeline.jsonl.gz
# (every kernel of the profiled iterations), $OUT/kernels.jsonl, $OUT/smi.csv, $OUT/log.txt; a table last
# (python validation/train3d_onset.py).
set -u
. validation/device/gpu_workdir.sh train3d_onset
. validation/device/smi_log.sh
# name hidden heads layers seq micro_batch micro_batches recompute expected-seconds-per-iteration
SHAPES=${SHAPES:-"A:2048:16:8:2048:2:8:none:0.23 G:6144:48:2:2048:4:4:none:0.42 B:4096:32:8:2048:1:8:none:0.36 \
F:3072:24:6:1024:8:2:full:0.19 E:1024:16:12:4096:2:4:full:0.17 H:4096:32:4:2048:2:8:none:0.38 D:4096:32:12:2048:1:8:none:0.52"}
for s in $SHAPES; do IFS=: read -r name d h L seq b m rc per <<<"$s"
  grep -qx "$name" "$W/done.txt" 2>/dev/null && continue
  (( $(date +%s) - t0 > DEADLINE - 50 )) && { echo "deadline: stop before $name"; break; }
  k=$(python3 -c "import math; print(max(3, math.ceil(${PROFILE_S:-2} / $per)))")
  extra=""; [ "$rc" = full ] && extra="--recompute"
  sleep 4
  timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/train_3d.py --hidden "$d" \
    --heads "$h" --layers "$L" --seq "$seq" --micro-batch "$b" --micro-batches "$m" $extra --warmup 3 --iters 1 \
    --dtype bf16 --idle-s 2 --kernels "$R/kernels.jsonl" --profile-iters "$k" --timeline "$W/timeline.jsonl" \
    >> "$R/log.txt" 2>&1 && echo "$name" >> "$W/done.txt" || { echo "FAILED $name"; tail -3 "$R/log.txt"; }
  tail -1 "$R/log.txt"
done
kill $SMI 2>/dev/null
gzip -c "$W/timeline.jsonl" > "$R/timeline.jsonl.gz"
python3 validation/train3d_onset.py "$R/timeline.jsonl.gz" 2>&1 | tail -40
echo "total $(( $(date +%s) - t0 )) s"
