#!/usr/bin/env bash
# Device batch (one GPU): validation/probe_launch_gap.py (does an operator's sample see the GPU's gap
# between kernels?). $OUT/launch_gap.jsonl, $OUT/log.txt; the table last.
set -u
. validation/device/gpu_workdir.sh launch_gap
python3 validation/probe_launch_gap.py --out "$R/launch_gap.jsonl" > "$R/log.txt" 2>&1
grep -v Warning "$R/log.txt" | tail -20
echo "total $(( $(date +%s) - t0 )) s"
