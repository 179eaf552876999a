#!/usr/bin/env bash
# Device batch: validation/train_hf_parallel.py (HF GPT-NeoX under DDP / DTensor TP / pipelining / FSDP2)
# on one host. First the 1gpu layout with one process, then LAYOUTS with NPROC processes, each one torchrun
# that runs every (layout, shape) pair in sequence. Rows go to $WORK/measured.csv (resumable: a pair already
# there is skipped, so re-running the same command after a 10-minute cut continues), copied to $OUT with
# the logs; a table of the rows is printed last. A failed torchrun is reported and the script goes on.
#
#   NPROC=2 (or 4)    GPUs of the multi-GPU layouts
#   LAYOUTS=...       comma-separated (default: every layout of NPROC GPUs this trainer implements)
#   SCHEDULES=1f1b    pipeline schedules to run the pp layouts with ("1f1b gpipe" for both)
#   SHAPES=CSV        default validation/hf_parallel_shapes.csv
#   BUDGET_S=420      start no new pair after this many seconds (the device command limit is 600 s)
#   KERNELS=1         also profile one iteration per pair (<csv>.kernels.jsonl); KERNELS=all on every
#                     rank (rank r > 0 into <csv>.kernels.rank<r>.jsonl: each pipeline stage's kernels)
#   TIMELINE=1        profile one iteration per pair on every rank and keep every kernel with its launch time
#                     (<csv>.timeline.rank<r>.jsonl, returned together as $OUT/timeline.tgz)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
NPROC=${NPROC:-2}
case "$NPROC" in
  2) DEFAULT_LAYOUTS="dp2,tp2,pp2,fsdp2" ;;
  4) DEFAULT_LAYOUTS="dp4,tp4,pp4,fsdp4,fsdp2xtp2,pp2xtp2" ;;
  *) DEFAULT_LAYOUTS="dp$NPROC,tp$NPROC,pp$NPROC,fsdp$NPROC" ;;
esac
LAYOUTS=${LAYOUTS:-$DEFAULT_LAYOUTS}
SCHEDULES=${SCHEDULES:-1f1b}
SHAPES=${SHAPES:-validation/hf_parallel_shapes.csv}
OUT=${OUT:-out}; WORK=${WORK:-/tmp/hf_parallel}; CSV="$WORK/measured.csv"
KFLAG=""; [ "${KERNELS:-0}" = 1 ] && KFLAG="--kernels"; [ "${KERNELS:-0}" = all ] && KFLAG="--kernels-all-ranks"
[ "${TIMELINE:-0}" = 1 ] && KFLAG="$KFLAG --timeline"
mkdir -p "$OUT" "$WORK"
start=$(date +%s); budget=${BUDGET_S:-420}

left() { echo $(( budget - ($(date +%s) - start) )); }

# one torchrun; its own --time-budget is what is left of ours, the timeout a margin above that
run() {  # run NPROC LAYOUTS SCHEDULE TAG
  local n=$1 lays=$2 sched=$3 tag=$4 rem
  rem=$(left)
  if [ "$rem" -le 0 ]; then echo "budget reached before $tag"; return 0; fi
  env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    timeout $(( rem + 150 )) python3 -m torch.distributed.run --standalone --nproc-per-node "$n" \
    validation/train_hf_parallel.py --layouts "$lays" --schedule "$sched" --shapes "$SHAPES" \
    --warmup 3 --iters 8 --time-budget "$rem" $KFLAG --out "$CSV" > "$WORK/log-$tag.txt" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAILED $tag (exit $rc; 124 = timeout); from $WORK/log-$tag.txt:"
    # the worker's own message (error:, a Python exception, "failed", OOM) rather than torchrun's summary
    grep -E "^error:|Error|failed$|out of memory" "$WORK/log-$tag.txt" | grep -v -i "warn" | tail -6
  fi
  cp "$WORK/log-$tag.txt" "$OUT/" 2>/dev/null
  return 0
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/gpus.csv" 2>/dev/null
nvidia-smi topo -m > "$OUT/topo.txt" 2>/dev/null

run 1 1gpu 1f1b 1gpu
run "$NPROC" "$LAYOUTS" 1f1b "${NPROC}gpu"
for s in $SCHEDULES; do
  [ "$s" = 1f1b ] && continue
  pp_layouts=$(echo "$LAYOUTS" | tr , '\n' | grep '^pp' | paste -sd, -)
  [ -n "$pp_layouts" ] && run "$NPROC" "$pp_layouts" "$s" "${NPROC}gpu-$s"
done

cp "$CSV" "$OUT/measured_hf_parallel.csv" 2>/dev/null
[ -f "$CSV.kernels.jsonl" ] && cp "$CSV.kernels.jsonl" "$OUT/measured_hf_parallel.csv.kernels.jsonl"
for f in "$CSV".kernels.rank*.jsonl; do [ -f "$f" ] && cp "$f" "$OUT/measured_hf_parallel.csv.${f##*.csv.}"; done
ls "$CSV".timeline.rank*.jsonl > /dev/null 2>&1 && tar -czf "$OUT/timeline.tgz" -C "$WORK" $(cd "$WORK" && ls measured.csv.timeline.rank*.jsonl)
echo "elapsed $(( $(date +%s) - start )) s"
python3 - "$CSV" <<'EOF'
import csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1], newline="")))
except FileNotFoundError:
    sys.exit("no rows")
cols = ("layout", "schedule", "name", "stage_layers", "min_s", "median_s", "max_mem_gib", "loss", "device")
table = [cols] + [tuple(r[c] for c in cols) for r in rows]
w = [max(len(t[i]) for t in table) for i in range(len(cols))]
for t in table:
    print("  ".join(v.ljust(n) for v, n in zip(t, w)))
EOF
