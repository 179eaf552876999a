#!/usr/bin/env bash
# Device batch: NCCL collectives on a 4-GPU host (NPROC=4, COLL_GROUPS=2,4: groups of 2 and of 4, all groups of a size at
# once), 1 KiB .. 4 GiB with half-octave sizes to hold out. Writes under $OUT; resumable (re-run
# the same command on the same warm machine and finished keys are skipped). Multicast stays off.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; WORK=${WORK:-/tmp/coll4}
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$OUT/gpus.csv"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())' > "$OUT/versions.txt"
timeout "${BUDGET_S:-420}" python3 -m torch.distributed.run --standalone --nproc-per-node "${NPROC:-4}" \
  -m trainsim.calibration.collectives_bench --out "$WORK" --groups "${COLL_GROUPS:-2,4}" --per-octave 2 \
  --min-bytes 1024 --max-bytes 4294967296 --warmup 5 --iters 20 -q
echo "bench exit $?"
cp "$WORK"/* "$OUT"/ 2>/dev/null
python3 - "$OUT/collectives.csv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
by = defaultdict(list)
for r in rows:
    by[(r["collective"], r["gpus_per_node"], int(r["entries"]) * 2)].append(float(r["duration_us"]) * 1e-6)
print(f"{len(rows)} rows; median us / busbw-ish GB/s at selected sizes")
for (k, g, b), v in sorted(by.items()):
    if b in (1024, 2**20, 2**26, 2**30, 2**32):
        m = statistics.median(v)
        print(f"{k:15} g{g} {b:>11} B {m * 1e6:10.1f} us {b / m / 1e9:8.1f} GB/s")
PY
