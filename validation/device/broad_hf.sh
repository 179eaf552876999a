#!/usr/bin/env bash
# Device batch (one H100 or H200): the Hugging Face GPT-NeoX kinds (hf_*) over the broad box (issue 9,
# item 4: the shapes trained today), timing the GPU alone as the shipped hf samples were
# (`calibrate --gpu-time`). The paper box stops at micro-batch 16, sequence 5120, hidden 8192 and
# GPT-NeoX's vocabulary (50,432); this plan reaches micro-batch 64, sequence 30,464, hidden 16,384 and
# vocabularies 32k-256k at mp 1 (`--ops hf --box broad --points 128 --seed 7 --max-gib 60`: 2,200 rows,
# tokens capped per GEMM as the broad box caps them; sampling.broad_ops).
# Resumable ($WORK/<gpu>, RESUME_FROM_<gpu>); copied to $OUT/<gpu> at the end, with a short table.
# Multicast off (one GPU: no NCCL, set anyway).
set -u
DEADLINE_S=${DEADLINE_S:-540}
. validation/device/gpu_workdir.sh broad_hf  # multicast off, $R, $DEADLINE, $t0, $NAME, $G, $W
RES=RESUME_FROM_$G; RES=${!RES:-}
if [ -n "$RES" ] && [ -f "$RES/compute.csv" ] && [ ! -f "$W/compute.csv" ]; then cp "$RES"/* "$W/"; fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv > "$W/gpus.csv" 2>&1
budget=$(( DEADLINE - ($(date +%s) - t0) ))
timeout $(( budget + 40 )) python3 -m trainsim calibrate --out "$W" --gpu-time --time-budget "$budget" -q \
  --ops hf --box broad --points 128 --seed 7 --max-gib 60 > "$W/broad_hf.log" 2>&1
echo "broad_hf: exit $? at $(( $(date +%s) - t0 )) s: $(tail -1 "$W/broad_hf.log")"
mkdir -p "$R/$G" && cp -r "$W"/. "$R/$G/"
python3 - "$W/compute.csv" <<'PY'
import csv, collections, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(list)
for r in rows:
    by[r["op"]].append(r)
print(f"{len(rows)} rows")
print(f"{'op':16s} {'rows':>5s} {'b max':>6s} {'l max':>6s} {'d max':>6s} {'v max':>7s}")
for op, rs in sorted(by.items()):
    print(f"{op:16s} {len(rs):5d} {max(int(r['b']) for r in rs):6d} {max(int(r['l']) for r in rs):6d} "
          f"{max(int(r['d']) for r in rs):6d} {max(int(r['v']) for r in rs):7d}")
PY
echo "total $(( $(date +%s) - t0 )) s"
