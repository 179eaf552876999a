#!/usr/bin/env bash
# Device batch (a 4-GPU host): a held-out check of the pipelines' host clock on an eighth unseen draw
# (validation/configs_unseen8.csv, its subsets written before the run): 1gpu at its ten no-recompute shapes,
# pp2 on GPUs 0 and 1, then pp2xtp2, fsdp2xtp2 and tp4 on all four; with the time left, the tiny host
# shapes of the 4-GPU layouts (this machine's host factor). $OUT/unseen8_2gpu.csv, unseen8_4gpu.csv,
# host4.csv, gpus.csv, topo.txt, cpu.txt, logs.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s); TOTAL=${TOTAL_S:-540}
lscpu > "$R/cpu.txt" 2>/dev/null
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
V=validation/hf_parallel_shapes_unseen8
CUDA_VISIBLE_DEVICES=0,1 OUT=$R/u2 WORK=/tmp/u8_2 NPROC=2 LAYOUTS=pp2 SHAPES=${V}_pp2.csv BUDGET_S=150 \
  bash validation/device/hf_parallel.sh > /tmp/u8_2.log 2>&1
for spec in pp2xtp2:${V}_pp2xtp2.csv fsdp2xtp2:${V}_tp2.csv tp4:${V}_tp4.csv; do
  l=$(left); [ "$l" -le 60 ] && { echo "no time left for ${spec%%:*}"; continue; }
  OUT=$R/u4 WORK=/tmp/u8_4 NPROC=4 LAYOUTS=${spec%%:*} SHAPES=${spec#*:} BUDGET_S=$(( l - 60 )) \
    bash validation/device/hf_parallel.sh >> /tmp/u8_4.log 2>&1
done
l=$(left); [ "$l" -gt 90 ] && OUT=$R/h4 WORK=/tmp/host4 NPROC=4 SHAPES=validation/hf_parallel_shapes_host.csv \
  BUDGET_S=$(( l - 70 )) bash validation/device/hf_parallel.sh > /tmp/host4.log 2>&1
cp /tmp/u8_2/measured.csv "$R/unseen8_2gpu.csv" 2>/dev/null; cp /tmp/u8_4/measured.csv "$R/unseen8_4gpu.csv" 2>/dev/null
cp /tmp/host4/measured.csv "$R/host4.csv" 2>/dev/null; cp "$R/u2/gpus.csv" "$R/u4/topo.txt" "$R/" 2>/dev/null
tar czf "$R/logs.tgz" -C / tmp/u8_2.log tmp/u8_4.log $(cd / && ls -d tmp/host4.log tmp/u8_2/log-* tmp/u8_4/log-* tmp/host4/log-* 2>/dev/null) 2>/dev/null
rm -rf "$R/u2" "$R/u4" "$R/h4"
tail -12 /tmp/u8_2.log; tail -26 /tmp/u8_4.log; tail -4 /tmp/host4.log 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
