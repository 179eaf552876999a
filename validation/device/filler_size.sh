#!/usr/bin/env bash
# Device batch (one GPU): validation/probe_filler_size.py (is it the GEMM's size or the filler's that keeps
# a training iteration's GEMMs from throttling?), nvidia-smi's SM clock and power every 0.1 s beside it.
# $OUT/filler_size.jsonl, $OUT/smi.csv, $OUT/gpus.csv, $OUT/log.txt; the table last.
set -u
. validation/device/gpu_workdir.sh filler_size
. validation/device/smi_log.sh
python3 validation/probe_filler_size.py --out "$R/filler_size.jsonl" --idle-s "${IDLE_S:-2}" \
  --sustain-s "${SUSTAIN_S:-6}" > "$R/log.txt" 2>&1
kill $SMI 2>/dev/null
tail -40 "$R/log.txt"
echo "total $(( $(date +%s) - t0 )) s"
