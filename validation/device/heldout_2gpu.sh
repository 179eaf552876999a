#!/usr/bin/env bash
# Device batch (a 2- or 4-GPU host): a held-out draw of Hugging Face shapes under the layouts of
# validation/train_hf_parallel.py, the subsets written and committed before the run:
#   SET=unseen12  -> validation/hf_parallel_shapes_${SET}.csv (1gpu, fsdp, dp: shapes without recompute),
#                    ..._pp2.csv (pp2: two or more micro-batches), ..._tp2.csv (tp2 and fsdp2xtp2: even heads),
#                    ..._pp2xtp2.csv, ..._tp4.csv (heads divisible by 4), ..._pp4.csv
#   ORDER="pp2 tp2 fsdp2,dp2"   the order the layout groups run in (the first ones are what is missing)
#   NPROC=2       GPUs of the multi-GPU layouts (4 for tp4, pp4, fsdp2xtp2, pp2xtp2, dp4, fsdp4)
# One resumable work folder per set and GPU count (/tmp/heldout_${SET}_${NPROC}): re-running on the same warm machine skips the
# pairs already measured. $OUT/${SET}_${NPROC}gpu.csv (every row, 1gpu included), gpus.csv, topo.txt, cpu.txt,
# logs.tgz; the rows' table last (hf_parallel.sh's own).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
SET=${SET:?SET=unseenN}; ORDER=${ORDER:-"pp2 tp2 fsdp2,dp2"}
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s); TOTAL=${TOTAL_S:-540}
W=/tmp/heldout_${SET}_${NPROC:-2}; V=validation/hf_parallel_shapes_$SET
lscpu > "$R/cpu.txt" 2>/dev/null
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
for lays in $ORDER; do
  case "$lays" in pp2|pp2xtp2|tp4|pp4|tp2) S=${V}_$lays.csv ;; fsdp2xtp2) S=${V}_tp2.csv ;; *) S=${V}.csv ;; esac
  l=$(left); [ "$l" -le 60 ] && { echo "no time left for $lays"; continue; }
  OUT=$R/parts WORK=$W NPROC=${NPROC:-2} LAYOUTS=$lays SHAPES=$S BUDGET_S=$(( l - 60 )) \
    bash validation/device/hf_parallel.sh >> "/tmp/heldout_${SET}_${NPROC:-2}.log" 2>&1
done
cp "$W/measured.csv" "$R/${SET}_${NPROC:-2}gpu.csv" 2>/dev/null; cp "$R/parts/gpus.csv" "$R/parts/topo.txt" "$R/" 2>/dev/null
tar czf "$R/logs.tgz" -C / "tmp/heldout_${SET}_${NPROC:-2}.log" $(cd / && ls -d tmp/heldout_${SET}_${NPROC:-2}/log-* 2>/dev/null) 2>/dev/null
rm -rf "$R/parts"
# hf_parallel.sh prints every row of the shared measured.csv last: the last call's table is the whole set's
awk '/^elapsed/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "/tmp/heldout_${SET}_${NPROC:-2}.log"
echo "total $(( $(date +%s) - t0 )) s"
