#!/usr/bin/env bash
# Device batch (one H100 or H200): re-measure the Hugging Face operator kinds (hf_*) timing the GPU
# alone (`calibrate --gpu-time`: a sleep kernel holds the GPU while the CPU queues the timed runs,
# as in training where the CPU runs ahead). The old protocol's events also timed a launch-bound
# operator's CPU launches, which training hides: the multi-GPU tables' one-GPU rows came out
# 3-21 % slow while the kernel trace showed the GPU busy 93 % of the step (docs/multi_gpu.md).
#   1. an A/B smoke: eight hf operators at d1024, b4, l2048 under both protocols (ab.txt)
#   2. `--ops hf --configs validation/configs.csv --points 160 --seed 0` (3,634 rows: the paper box
#      and the 12 validation configurations' exact operators, as the shipped hf samples were planned)
#   3. `--ops hf --hf-tp --points 96 --seed 1` (2,204 rows: one rank of DTensor TP, mp 2-16)
# Resumable ($WORK/<gpu>, RESUME_FROM_<gpu>); copied to $OUT/<gpu> at the end. Multicast off.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; DEADLINE=${DEADLINE_S:-530}
t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) GPU=h200 ;; *H100*) GPU=h100 ;; *) GPU=other ;; esac
W=${WORK:-/tmp/gpu_time_hf}/$GPU
mkdir -p "$R" "$W"
RES=RESUME_FROM_$GPU; RES=${!RES:-}
if [ -n "$RES" ] && [ -f "$RES/compute.csv" ] && [ ! -f "$W/compute.csv" ]; then cp "$RES"/* "$W/"; fi
echo "GPU: $NAME -> $W"
timeout 90 python3 - > "$W/ab.txt" 2>&1 <<'PY'
from trainsim.calibration.harness import make_env, measure
from trainsim.operators.ops import Direction, Op, OpKind
old, new = make_env("cuda", "bf16", 0), make_env("cuda", "bf16", 0, cpu_ahead=True)
print(f"sleep rate {new.sleep_cycles_per_ms:.4g} cycles/ms")
print(f"{'op':16s} {'dir':4s} {'events+launch us':>17s} {'GPU only us':>12s} {'ratio':>6s}")
for k in ("hf_layernorm", "hf_qkv", "hf_attention", "hf_dense", "hf_mlp_up", "hf_mlp_down", "hf_residual", "hf_lm_head"):
    for d in (Direction.FWD, Direction.BWD):
        op = Op(OpKind(k), b=4, l=2048, d=1024, h=16, v=50432)
        a, b = measure(op, d, old), measure(op, d, new)
        print(f"{k:16s} {d.value:4s} {a:17.1f} {b:12.1f} {b / a:6.2f}")
PY
cat "$W/ab.txt"
left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }
cal() {
  local n=$1; shift; local budget; budget=$(left)
  if [ "$budget" -lt 20 ]; then echo "skip $n: deadline"; return; fi
  timeout $(( budget + 40 )) python3 -m trainsim calibrate --out "$W" --gpu-time --time-budget "$budget" -q "$@" > "$W/$n.log" 2>&1
  echo "$n: exit $? at $(( $(date +%s) - t0 )) s: $(tail -1 "$W/$n.log")"
}
cal hf --ops hf --configs validation/configs.csv --points 160 --seed 0
cal hf_tp --ops hf --hf-tp --points 96 --seed 1
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv > "$W/gpus.csv" 2>&1
mkdir -p "$R/$GPU" && cp -r "$W"/. "$R/$GPU/"
echo "total $(( $(date +%s) - t0 )) s; $(($(wc -l < "$W/compute.csv") - 1)) rows"
