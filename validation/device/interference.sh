#!/usr/bin/env bash
# Device batch: compute-communication interference (calibration/interference_bench.py) on NPROC GPUs of one
# host (default 2): 5 GEMMs, causal flash attention fwd+bwd and a 256 MiB add, each while all_reduce /
# all_gather / reduce_scatter / p2p exchanges of 4, 32 and 256 MiB run back to back (84 keys, ~1 s each).
# Writes under $OUT/interference; resumable (re-run on the same warm machine: finished keys are skipped).
# Multicast stays off: the variables are on the torchrun command line, so every worker inherits them.
# NCCL_DEBUG=INFO (INIT only, to a file) records the channel counts: NCCL's SM footprint.
# SIZES=BYTES,... other message sizes (e.g. 536870912,1073741824: FSDP2's gathers of a large layer).
set -uo pipefail
NPROC=${NPROC:-2}; BUDGET_S=${BUDGET_S:-100}; REPEATS=${REPEATS:-5}
OUT=${OUT:-out}/interference; WORK=${WORK:-/tmp/interference}
export PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/gpus.csv"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
# --time-budget stops starting keys after BUDGET_S s of measuring; the hard timeout adds start-up
# (torchrun, NCCL init, ~20 s) and the key in flight
timeout $((BUDGET_S + 90)) env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE="$WORK/nccl.%h.%p.log" \
  python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
  -m trainsim.calibration.interference_bench --out "$WORK" --repeats "$REPEATS" --time-budget "$BUDGET_S" -q \
  ${SIZES:+--sizes "$SIZES"} \
  > "$OUT/bench.log" 2>&1
echo "bench exit $? ($(wc -l < "$OUT/bench.log") log lines in $OUT/bench.log; last ones:)"
grep -v "FutureWarning\|return func" "$OUT/bench.log" | grep -i "error\|Traceback\|skipped\|budget" | tail -5
cp "$WORK"/interference.csv "$WORK"/meta.json "$OUT"/ 2>/dev/null
grep -h "channels" "$WORK"/nccl.*.log 2>/dev/null | sed 's/^[^ ]* [^ ]* //' | sort | uniq -c > "$OUT/nccl_channels.txt"
echo "NCCL channels (SM footprint):"; head -4 "$OUT/nccl_channels.txt"
[ -s "$OUT/interference.csv" ] || { echo "no interference.csv"; exit 1; }
python3 - "$OUT" <<'PY'
import sys
from pathlib import Path
from trainsim.calibration.interference import load_interference, read_rows, save_interference
from trainsim.calibration.interference_bench import print_table
out = Path(sys.argv[1])
rows = read_rows(out / "interference.csv")
print(f"{len(rows)} rows; flagged: {sum(1 for m in rows if m.coverage is not None and m.coverage < 0.95)} low coverage, "
      f"{sum(1 for m in rows if m.coll_overlap_us is None)} without collective overlap time")
print_table(out / "interference.csv")
save_interference(load_interference(out / "interference.csv"), out / "interference.json")
PY
