#!/usr/bin/env bash
# Device batch (2 or 4 GPUs, NPROC): does a training process's host slow down when its host runs more of them?
# One process alone (train_hf_parallel.py --layouts 1gpu), then 2 and 4 processes each training its
# own replica with no communication at all (probe_ddp.py --variants alone), then one process again
# (drift); two shapes, the same machine. Rows in $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; S=${SHAPE_CSV:-validation/hf_parallel_shapes.csv}; ONLY=${SHAPES:-d1024-L12,d2048-L8}
t0=$(date +%s)
one() {
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    validation/train_hf_parallel.py --layouts 1gpu --shapes "$S" --only "$ONLY" --out "$R/one_$1.csv" > "$R/one_$1.log" 2>&1
  echo "one process ($1): exit $? at $(( $(date +%s) - t0 )) s"
}
alone() {
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( $1 - 1 ))) timeout 200 python3 -m torch.distributed.run --standalone \
    --nproc-per-node "$1" validation/probe_ddp.py --layout "dp$1" --variants alone --shapes "$S" --only "$ONLY" \
    --rounds 2 --iters 6 --out "$R/alone$1.jsonl" > "$R/alone$1.log" 2>&1
  echo "$1 processes: exit $? at $(( $(date +%s) - t0 )) s"
}
one a; alone 2; [ "${NPROC:-4}" -ge 4 ] && alone 4; one b
lscpu | grep -E "Model name|^CPU\(s\)" > "$R/cpu.txt"
python3 - "$R" <<'PY'
import csv, json, sys, glob
from collections import defaultdict
r = sys.argv[1]
t = defaultdict(dict)
for tag in ("a", "b"):
    for row in csv.DictReader(open(f"{r}/one_{tag}.csv")):
        t[row["name"]][f"1 ({tag})"] = float(row["min_s"])
for n in (2, 4):
    if not glob.glob(f"{r}/alone{n}.jsonl"):
        continue
    for line in open(f"{r}/alone{n}.jsonl"):
        row = json.loads(line)
        k = f"{n} alone"
        t[row["shape"]][k] = min(t[row["shape"]].get(k, 9.9), row["min_s"])
for shape, v in t.items():
    print(shape, "  ".join(f"{k}: {x:.4f}" for k, x in v.items()))
PY
