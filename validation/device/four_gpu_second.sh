#!/usr/bin/env bash
# Device batch (a 4-GPU host): a second 4x machine for issue 15's DTensor and pipeline misses on machine CB.
#   1. the tiny host shapes under every 4-GPU layout (validation/hf_parallel_shapes_host.csv): this machine's
#      host factor per runtime, and H200 rows for the pipelined DTensor line (dtensor_tp_pp) and the 4-rank lag;
#   2. unseen7's shapes under tp4, pp2xtp2, fsdp2xtp2 and pp4, as CB ran them (its subsets, written before CB's run).
# $OUT/host4.csv, $OUT/unseen7_4gpu.csv, gpus.csv, topo.txt, cpu.txt, logs.tgz; a table of each last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
lscpu > "$R/cpu.txt" 2>/dev/null
OUT=$R/h4 WORK=/tmp/host4 NPROC=4 SHAPES=validation/hf_parallel_shapes_host.csv BUDGET_S=${HOST_BUDGET_S:-140} \
  bash validation/device/hf_parallel.sh > /tmp/host4.log 2>&1
cp /tmp/host4/measured.csv "$R/host4.csv"
u7() {  # LAYOUT SHAPES
  local left=$(( ${TOTAL_S:-520} - ($(date +%s) - t0) ))
  [ "$left" -le 20 ] && { echo "no time left for $1"; return; }
  OUT=$R/u7 WORK=/tmp/u7 NPROC=4 LAYOUTS=$1 SHAPES=$2 BUDGET_S=$(( left - 60 )) \
    bash validation/device/hf_parallel.sh >> /tmp/u7.log 2>&1
}
u7 tp4 validation/hf_parallel_shapes_unseen7_tp4.csv
u7 pp2xtp2 validation/hf_parallel_shapes_unseen7_pp2xtp2.csv
u7 fsdp2xtp2 validation/hf_parallel_shapes_unseen7_tp2.csv
u7 pp4 validation/hf_parallel_shapes_unseen7_pp4.csv
cp /tmp/u7/measured.csv "$R/unseen7_4gpu.csv" 2>/dev/null
cp "$R/h4/gpus.csv" "$R/h4/topo.txt" "$R/" 2>/dev/null
tar czf "$R/logs.tgz" -C / tmp/host4.log tmp/u7.log $(cd / && ls -d tmp/host4/log-* tmp/u7/log-* 2>/dev/null) 2>/dev/null
rm -rf "$R/h4" "$R/u7"
tail -30 /tmp/host4.log; tail -30 /tmp/u7.log
echo "total $(( $(date +%s) - t0 )) s"
