#!/usr/bin/env bash
# Device batch (one H100): the reference's timing protocol against ours at the reference's own GEMM
# shapes (validation/probe_reference_protocol.py; shapes in validation/reference_protocol/shapes.csv).
# Resumable under $WORK; the SM clock and power sampled every 100 ms beside it; copied to $OUT/<gpu>.
set -u
. validation/device/gpu_workdir.sh reference_protocol  # multicast off, $R, $DEADLINE, $t0, $NAME, $G, $W
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 \
  >> "$W/smi.csv" 2>/dev/null &
SMI=$!
timeout $(( DEADLINE + 60 )) python3 validation/probe_reference_protocol.py --shapes validation/reference_protocol/shapes.csv \
  --out "$W/protocol.csv" --deadline-s "$DEADLINE" > "$W/probe.log" 2>&1
echo "probe: exit $? at $(( $(date +%s) - t0 )) s"; tail -3 "$W/probe.log"
kill $SMI 2>/dev/null
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > "$W/gpus.csv" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" > "$W/cpu.txt" 2>&1
mkdir -p "$R/$G" && cp -r "$W"/. "$R/$G/"
python3 - "$W/protocol.csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
g = defaultdict(list)
for r in rows:
    g[(r["kind"], r["direction"])].append(r)
print("| kind | dir | n | ref/ours | ref/ref_normal | zero grads |")
for (k, d), rs in sorted(g.items()):
    a = statistics.median(float(r["ref_us"]) / float(r["ours_us"]) for r in rs)
    b = statistics.median(float(r["ref_us"]) / float(r["ref_normal_us"]) for r in rs)
    z = statistics.median(float(r["grad_zero_share"]) for r in rs) if d == "bwd" else float("nan")
    print(f"| {k} | {d} | {len(rs)} | {a:.3f} | {b:.3f} | {z:.2f} |")
PY
echo "total $(( $(date +%s) - t0 )) s"
