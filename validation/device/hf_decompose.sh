#!/usr/bin/env bash
# Device batch (one GPU): on one chip, HF rows' cool iteration profiled (busy time, idle gaps) and the same
# rows' unprofiled bursts and sustained load, to split the cap-free prices' error into the kernels and the
# idle (docs/efficiency.md, "A training iteration's cap, measured three ways"). ROWS (validation/configs.csv
# names); $OUT/prof/ (throttle_onset.sh PROFILE_PAIRS) and $OUT/pairs/ (PAIRS), each with its onset.jsonl.
set -u
R=${OUT:-out}; t0=$(date +%s); ROWS=${ROWS:-c03,c06,c10,u16,w07,c08}; mkdir -p "$R"
OUT="$R/prof" PROFILE_PAIRS="$ROWS" SUSTAIN_S=3 COOL_S=3 DEADLINE_S=200 bash validation/device/throttle_onset.sh \
  > "$R/prof.log" 2>&1
tail -8 "$R/prof.log"
OUT="$R/pairs" PAIRS="$ROWS" SUSTAIN_S=${SUSTAIN_S:-10} DEADLINE_S=$(( ${DEADLINE_S:-480} - ($(date +%s) - t0) )) \
  bash validation/device/throttle_onset.sh > "$R/pairs.log" 2>&1
tail -10 "$R/pairs.log"
echo "total $(( $(date +%s) - t0 )) s"
