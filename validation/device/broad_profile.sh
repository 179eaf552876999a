#!/usr/bin/env bash
# Device batch (one GPU, H100 or H200, whichever the lent machine has): operator samples for
# issue 9's profiles into a sample directory named after the GPU. Run from the repository root
# with $OUT set. Resumable: samples go to $WORK/<gpu> (default /tmp/broad/<gpu>, kept on a warm
# machine) and are appended as measured; re-running continues. RESUME_FROM=<a copy in the
# repository> seeds a fresh machine. The folder is copied to $OUT/<gpu> at the end.
#
#   1. the launch floor: the CUDA-event time of a one-element kernel (median of 2,000), launch.json
#   2. H200 only (no H200 operator profile exists): the paper's box, every default kind
#      (`--points 96 --seed 0`, 5,506 rows), then SwiGLU and FP8 (`--points 64 --seed 2`, 1,178 rows)
#      and validation/train_gptneox.py's 12 configurations (measured_h200.csv, for `trainsim validate`)
#   3. the broad box (`--box broad --points $BROAD_POINTS --seed 5`, 128 by default, 4,502 rows: d to 16384, l to 32768, b to
#      64, GQA, SwiGLU widths, vocabulary to 256k; Megatron, SwiGLU and FP8 kinds)
#   4. a short table: rows per kind, median efficiency against the datasheet roofline
#
# H200_ONLY=1 runs nothing on another GPU (a call for an H200 that landed elsewhere).
# STEPS=a runs only the H200's validation runs and paper box, STEPS=b only its SwiGLU/FP8 and broad box
# (two GPUs of one host, one half each: validation/device/h200_or_machine.sh); default: all.
#
# Every calibrate call stops starting rows at the shared deadline (DEADLINE_S, default 530 s after
# the start), so one call of the script stays under 10 minutes; what is left is measured by a re-run.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; DEADLINE=${DEADLINE_S:-530}
t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) GPU=h200 ;; *H100*) GPU=h100 ;; *) GPU=other ;; esac
W=${WORK:-/tmp/broad}/$GPU
mkdir -p "$R" "$W"
echo "GPU: $NAME -> $GPU, work folder $W"
if [ "${H200_ONLY:-0}" = 1 ] && [ "$GPU" != h200 ]; then echo "H200_ONLY: not an H200, nothing run"; exit 0; fi
RES=RESUME_FROM_$GPU; RES=${!RES:-}  # RESUME_FROM_h100 / RESUME_FROM_h200: only the same GPU's samples
if [ -n "$RES" ] && [ -f "$RES/compute.csv" ] && [ ! -f "$W/compute.csv" ]; then
  cp "$RES"/* "$W/" && echo "resuming from $RES"
fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv > "$W/gpus.csv" 2>&1

timeout 60 python3 - "$W/launch.json" <<'PY'
import json, statistics, sys
import torch
x = torch.zeros(1, device="cuda")
for _ in range(200):
    x.add_(1)
torch.cuda.synchronize()
ts = []
for _ in range(2000):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); x.add_(1); b.record(); b.synchronize()
    ts.append(a.elapsed_time(b) * 1e3)
out = {"gpu": torch.cuda.get_device_name(0), "kernel": "one-element add_, CUDA events around it",
       "median_us": statistics.median(ts), "p10_us": sorted(ts)[200], "p90_us": sorted(ts)[1800], "n": len(ts)}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(out)
PY

left() { echo $(( DEADLINE - ($(date +%s) - t0) )); }
cal() {  # cal <log name> <calibrate args...>
  local n=$1; shift
  local budget; budget=$(left)
  if [ "$budget" -lt 20 ]; then echo "skip $n: deadline"; return; fi
  timeout $(( budget + 40 )) python3 -m trainsim calibrate --out "$W" --max-gib 60 --time-budget "$budget" -q "$@" > "$W/$n.log" 2>&1
  echo "$n: exit $? at $(( $(date +%s) - t0 )) s: $(tail -1 "$W/$n.log")"
}
STEPS=${STEPS:-all}
if [ "$GPU" = h200 ] && [ "$STEPS" != b ]; then
  # the single-GPU HF GPT-NeoX runs `trainsim validate` compares with, on this GPU (about 3 min)
  if [ ! -f "$W/measured_h200.csv" ] || [ "$(wc -l < "$W/measured_h200.csv")" -lt 13 ]; then
    timeout 240 python3 validation/train_gptneox.py --out "$W/measured_h200.csv" > "$W/train.log" 2>&1
    echo "train_gptneox exit $? at $(( $(date +%s) - t0 )) s: $(wc -l < "$W/measured_h200.csv") lines"
  fi
  # and the configurations no profile was sampled at (validation/configs_unseen*.csv), for the unseen check
  for u in unseen unseen2; do
    if [ ! -f "$W/measured_${u}_h200.csv" ]; then
      timeout 150 python3 validation/train_gptneox.py --configs "validation/configs_$u.csv" --time-budget 100 \
        --out "$W/measured_${u}_h200.csv" > "$W/train_$u.log" 2>&1
      echo "train_gptneox $u exit $? at $(( $(date +%s) - t0 )) s"
    fi
  done
  # a new profile: every kind timed on the GPU alone (--gpu-time, docs/efficiency.md)
  cal paper --ops all --configs validation/configs.csv --points 96 --seed 0 --gpu-time
fi
if [ "$GPU" = h200 ] && [ "$STEPS" != a ]; then
  cal fp8_swiglu --ops swiglu,fp8 --points 64 --seed 2 --gpu-time
fi
# the H100's broad samples were timed the old way (they are large, GPU-bound shapes); a new H200 profile's GPU-only
[ "$STEPS" != a ] && cal broad --ops megatron,swiglu,fp8 --box broad --points "${BROAD_POINTS:-128}" --seed 5 $( [ "$GPU" = h200 ] && echo --gpu-time )
mkdir -p "$R/$GPU" && cp -r "$W"/. "$R/$GPU/"

python3 - "$W" <<'PY'
import statistics, sys
from collections import defaultdict
from trainsim.calibration.samples import read_compute
from trainsim.operators.ops import bytes_moved, flops
rows = defaultdict(list)
for s in read_compute(sys.argv[1] + "/compute.csv"):
    rows[(s.op.kind.value, s.direction.value)].append(s)
print(f"{'kind':16s} {'dir':6s} {'rows':>5s} {'median us':>10s} {'median TFLOP/s':>14s} {'median GB/s':>11s}")
for (k, d), ss in sorted(rows.items()):
    tf = statistics.median(flops(s.op, s.direction) / s.duration_us / 1e6 for s in ss)
    gb = statistics.median(bytes_moved(s.op, s.direction) / s.duration_us / 1e3 for s in ss)
    print(f"{k:16s} {d:6s} {len(ss):5d} {statistics.median(s.duration_us for s in ss):10.1f} {tf:14.0f} {gb:11.0f}")
print(sum(len(v) for v in rows.values()), "rows in", sys.argv[1])
PY
echo "total $(( $(date +%s) - t0 )) s"
