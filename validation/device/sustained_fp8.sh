#!/usr/bin/env bash
# Device batch (one H100): burst against sustained GEMM speed and clocks, FP8 (torch._scaled_mm,
# e4m3) then bf16 again on the same machine (validation/probe_sustained_clock.py).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $NAME"
nvidia-smi --query-gpu=power.limit,clocks.max.sm,clocks.max.mem --format=csv | tee "$R/limits.csv"
for d in fp8 bf16; do
  timeout 150 python3 validation/probe_sustained_clock.py --dtype $d --out "$R/sustained.jsonl" > "$R/sustained_$d.log" 2>&1
done
python3 -c "
import json
for l in open('$R/sustained.jsonl'):
    r = json.loads(l); print(r['dtype'], r['m'], r['k'], r['n'], 'burst %.0f TF/s sustained %.0f TF/s ratio %.3f clocks %.0f -> %.0f MHz, %.0f W' % (
        r['burst_tflops'], r['sustained_tflops'], r['ratio'], r['after_burst_sm_mhz'], r['sustained_sm_mhz_median'], r['sustained_power_w_median']))
"
tail -2 "$R"/sustained_*.log
echo "total $(( $(date +%s) - t0 )) s"
