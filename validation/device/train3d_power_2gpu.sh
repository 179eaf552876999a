#!/usr/bin/env bash
# Device batch (two GPUs): validation/device/train3d_power.sh for train_3d.py's pp2, mp2 and dp2 at two of
# its one-GPU shapes (d2048-L8-b2-m8, d4096-L8-b1-m8): BURSTS iterations each after 2 s idle, then
# SUSTAIN_S seconds back to back, per layout; does the cap cost a 2-GPU iteration what it costs one GPU's?
# $OUT/<layout>/ packed as $OUT/layouts.tgz; each layout's table in $OUT/log.txt.
set -u
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
for L in "pp2:--pp 2" "mp2:--mp 2" "dp2:--dp 2"; do name=${L%%:*}; flags=${L#*:}
  (( $(date +%s) - t0 > ${DEADLINE_S:-520} - 110 )) && { echo "deadline: stop before $name"; break; }
  OUT="$R/$name" WORK="/tmp/train3d_power_2gpu_$name" NPROC=2 LAYOUT="$flags" PAIRS="" BURSTS=${BURSTS:-4} \
    SUSTAIN_S=${SUSTAIN_S:-10} DEADLINE_S=$(( ${DEADLINE_S:-520} - ($(date +%s) - t0) )) \
    SHAPES="A:2048:16:8:2048:2:8:none:0.13 B:4096:32:8:2048:1:8:none:0.21" \
    bash validation/device/train3d_power.sh > "$R/$name.log" 2>&1
  echo "== $name"; tail -12 "$R/$name.log"
done 2>&1 | tee "$R/log.txt"
(cd "$R" && tar -czf layouts.tgz pp2 mp2 dp2 *.log 2>/dev/null && rm -rf pp2 mp2 dp2 ./*.log)
echo "total $(( $(date +%s) - t0 )) s"
