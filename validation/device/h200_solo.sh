#!/usr/bin/env bash
# Device batch (one H200, nothing else running on the host's GPUs): the single-GPU HF GPT-NeoX
# validation runs again, alone, with the GPU's SM clock, power and throttle reasons logged every
# 100 ms. The first H200 tables (validation/broad_h200/a) were measured on GPU 0 while GPU 1 ran
# operator sampling; this batch tells whether that, or the H200's own sustained clock, explains
# their being 3-6 % slower than the operator samples predict. $OUT/measured_h200_solo.csv,
# $OUT/measured_unseen3_h200_solo.csv, $OUT/clocks.csv, a table last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,power.max_limit --format=csv > "$R/gpus.csv" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -i 0 -lms 100 > "$R/clocks.csv" 2>&1 &
SMI=$!
mark() { echo "$(date -u +%Y/%m/%d\ %H:%M:%S.%3N),$1" >> "$R/marks.csv"; }
mark start-configs
timeout 260 python3 validation/train_gptneox.py --out "$R/measured_h200_solo.csv" --time-budget 220 > "$R/train.log" 2>&1
mark start-unseen3
left=$(( 520 - ($(date +%s) - t0) ))
[ "$left" -gt 40 ] && timeout "$left" python3 validation/train_gptneox.py --configs validation/configs_unseen3.csv \
  --time-budget $(( left - 30 )) --out "$R/measured_unseen3_h200_solo.csv" > "$R/train_unseen3.log" 2>&1
mark end
kill $SMI
python3 - "$R" <<'PY'
import csv, statistics, sys
r = sys.argv[1]
rows = [l.split(", ") for l in open(f"{r}/clocks.csv") if l.count(",") >= 6]
def num(s):
    try: return float(s.split()[0])
    except ValueError: return None
busy = [x for x in rows if num(x[5]) and num(x[5]) > 50]
print("samples", len(rows), "busy", len(busy))
for i, name in [(1, "sm MHz"), (3, "power W"), (4, "temp C")]:
    v = [num(x[i]) for x in busy if num(x[i]) is not None]
    if v: print(f"{name}: median {statistics.median(v):.0f} p10 {sorted(v)[len(v)//10]:.0f} p90 {sorted(v)[9*len(v)//10]:.0f}")
from collections import Counter
print("throttle reasons while busy:", Counter(x[6].strip() for x in busy).most_common(5))
old = {x["name"]: x for x in csv.DictReader(open("validation/broad_h200/a/measured_h200.csv"))}
old.update({x["name"]: x for x in csv.DictReader(open("validation/broad_h200/a/measured_unseen3_h200.csv"))})
for f in ("measured_h200_solo.csv", "measured_unseen3_h200_solo.csv"):
    try: new = list(csv.DictReader(open(f"{r}/{f}")))
    except OSError: continue
    for x in new:
        o = old.get(x["name"])
        print(x["name"], x["iteration_s"], o and o["iteration_s"], o and f"{float(x['iteration_s'])/float(o['iteration_s']):.3f}")
PY
echo "total $(( $(date +%s) - t0 )) s"
