#!/usr/bin/env bash
# Device batch (one GPU, H100 or H200): burst against sustained GEMM speed and clocks
# (validation/probe_sustained_clock.py), then, on an H200, the unseen single-GPU configurations
# again with nothing else on the host's GPUs (the first ones ran beside operator sampling).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $NAME"
timeout 150 python3 validation/probe_sustained_clock.py --out "$R/sustained.jsonl" > "$R/sustained.log" 2>&1
case "$NAME" in *H200*)
  for u in unseen unseen2; do
    timeout 120 python3 validation/train_gptneox.py --configs "validation/configs_$u.csv" --time-budget 90 \
      --out "$R/measured_${u}_h200_solo.csv" > "$R/train_$u.log" 2>&1
  done ;;
esac
python3 -c "
import json
for l in open('$R/sustained.jsonl'):
    r = json.loads(l); print(r['m'], r['k'], r['n'], 'burst %.0f TF/s sustained %.0f TF/s ratio %.3f clocks %.0f -> %.0f MHz, %.0f W' % (
        r['burst_tflops'], r['sustained_tflops'], r['ratio'], r['after_burst_sm_mhz'], r['sustained_sm_mhz_median'], r['sustained_power_w_median']))
"
tail -3 "$R"/train_*.log 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
