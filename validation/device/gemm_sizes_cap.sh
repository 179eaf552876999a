#!/usr/bin/env bash
# Device batch (one GPU): do train_3d.py's GEMMs throttle as the power probe's 8192-cube GEMM does, and
# how fast do the same GEMMs run inside a loaded and a cool training iteration, on the same chip?
# 1. validation/probe_gemm_sizes_cap.py: each GEMM the harness's way after IDLE_S idle seconds, then
#    SUSTAIN_S seconds back to back, with its kernels' names ($OUT/gemm_sizes.jsonl);
# 2. validation/device/train3d_profile.sh at d2048-L8-b2-m8 and d6144-L2-b4-m4: one profiled iteration
#    after 30 back to back (loaded/), then after 2 s idle (cool/), packed as $OUT/profiles.tgz.
# nvidia-smi's SM clock and power every 0.1 s throughout ($OUT/smi.csv). Logs in $OUT/log.txt.
set -u
. validation/device/gpu_workdir.sh gemm_sizes_cap
. validation/device/smi_log.sh
python3 validation/probe_gemm_sizes_cap.py --out "$R/gemm_sizes.jsonl" --idle-s "${IDLE_S:-2}" \
  --sustain-s "${SUSTAIN_S:-6}" 2>&1 | tee -a "$R/log.txt"
P="A:2048:16:8:2048:2:8:none G:6144:48:2:2048:4:4:none"
mkdir -p "$R/prof"
OUT="$R/prof/loaded" SHAPES="$P" ITERS=30 bash validation/device/train3d_profile.sh >> "$R/log.txt" 2>&1
sleep 4
OUT="$R/prof/cool" SHAPES="$P" ITERS=3 IDLE_S=2 bash validation/device/train3d_profile.sh >> "$R/log.txt" 2>&1
kill $SMI 2>/dev/null
tar -czf "$R/profiles.tgz" -C "$R/prof" . && rm -rf "$R/prof"
grep -E "^d[0-9]+-L|^(mm|fwd|dgrad|wgrad) " "$R/log.txt"
echo "total $(( $(date +%s) - t0 )) s"
