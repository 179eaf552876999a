#!/usr/bin/env bash
# Device batch (one GPU): one profiled iteration (train_3d.py --kernels: kernel seconds by category and
# the top kernels by name) of train_3d.py's one-GPU shapes, each after ITERS back-to-back iterations
# (the power cap has set in, as in train3d_power.sh). $OUT/kernels.jsonl, $OUT/rows.csv, $OUT/log.txt.
# IDLE_S=2: each timed iteration and the profiled one after that many idle seconds instead (a burst).
set -u
. validation/device/gpu_workdir.sh train3d_profile
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm --format=csv > "$R/gpus.csv"
ITERS=${ITERS:-30}
SHAPES=${SHAPES:-"A:2048:16:8:2048:2:8:none F:3072:24:6:1024:8:2:full E:1024:16:12:4096:2:4:full G:6144:48:2:2048:4:4:none"}
for s in $SHAPES; do IFS=: read -r name d h L seq b m rc <<<"$s"
  (( $(date +%s) - t0 > DEADLINE - 60 )) && { echo "deadline: stop before $name"; break; }
  extra=""; [ "$rc" = full ] && extra="--recompute"
  timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 validation/train_3d.py --hidden "$d" \
    --heads "$h" --layers "$L" --seq "$seq" --micro-batch "$b" --micro-batches "$m" $extra --warmup 3 --iters "$ITERS" \
    --idle-s "${IDLE_S:-0}" --dtype bf16 --out "$R/rows.csv" --kernels "$R/kernels.jsonl" >> "$R/log.txt" 2>&1 || echo "FAILED $name"
  tail -1 "$R/log.txt"
done
python3 - "$R/kernels.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"d{d['hidden']}-L{d['layers']}-b{d['micro_batch']}-m{d['micro_batches']}: wall {d['wall_s']*1e3:.1f} busy "
          f"{d['busy_s']*1e3:.1f} gemm {d['gemm_s']*1e3:.1f} attn {d['attention_s']*1e3:.1f} other "
          f"{d['elementwise_other_s']*1e3:.1f} ms, {d['kernels']} kernels")
    for name, secs, count in d.get("top_kernels", [])[:12]:
        print(f"   {secs*1e3:8.2f} ms {count:5d}  {name[:110]}")
PY
echo "total $(( $(date +%s) - t0 )) s"
