#!/usr/bin/env bash
# Device batch (one H100): measure the exact Megatron operators of published LLaMA / GPT-3 /
# Nemotron configurations (validation/configs_published.csv: preset, micro-batch, tensor-parallel
# degree, sequence and context parallelism, bf16 or FP8) into a sample directory, so that the
# shipped profile's range covers hidden 16,384-18,432 and sequence 8,192. Run from the repository
# root with $OUT set; resumable (samples are appended as measured; re-run to continue).
# No install: torch comes with the machine, trainsim runs from the checkout. Multicast off.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; W=${WORK:-/tmp/published_shapes_kv}
mkdir -p "$R" "$W"
t0=$(date +%s)
N=$(python3 -c "
from trainsim.scenarios.commands.calibrate import read_configs
from trainsim.calibration.sampling import config_ops
print(len(config_ops(read_configs('validation/configs_published.csv'))))")
echo "$N (operator, direction) rows in the configurations"
timeout 480 python3 -m trainsim calibrate --out "$W" --configs validation/configs_published.csv --budget "$N" --ops all,swiglu,fp8 \
  --seed 3 --max-gib 60 --time-budget 420 > "$W/calibrate.log" 2>&1
echo "calibrate exit $? at $(( $(date +%s) - t0 )) s"
cp -r "$W" "$R/published_shapes"
python3 - "$W" <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1] + "/compute.csv")))
c = collections.Counter((r["op"], r["direction"]) for r in rows)
print(f"{len(rows)} rows")
for (k, d), n in sorted(c.items()):
    print(f"{k:16s} {d:6s} {n:4d}")
PY
tail -3 "$W/calibrate.log"
