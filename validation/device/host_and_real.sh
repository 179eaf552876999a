#!/usr/bin/env bash
# Device batch (a 4-GPU host): one machine's host speed and its real runs, for checking that the host
# fit's per-machine factor explains a machine's host-bound rows. First every layout on the tiny shapes
# (validation/device/host_tiny.sh), then the 4-GPU layouts on two real shapes
# (validation/hf_parallel_shapes_machine.csv). $OUT/host2.csv, host4.csv, real4.csv.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
[ -f /tmp/host4/measured.csv ] || OUT=$R bash validation/device/host_tiny.sh > /tmp/host_tiny.log 2>&1
echo "tiny done at $(( $(date +%s) - t0 )) s"; cp /tmp/host2/measured.csv "$R/host2.csv"; cp /tmp/host4/measured.csv "$R/host4.csv" 2>/dev/null
OUT=$R/r4 WORK=/tmp/real4 NPROC=4 LAYOUTS=tp4,fsdp4,fsdp2xtp2,pp2xtp2,dp4,pp4 SHAPES=validation/hf_parallel_shapes_machine.csv \
  BUDGET_S=${REAL_BUDGET_S:-240} bash validation/device/hf_parallel.sh > /tmp/real4.log 2>&1
cp /tmp/real4/measured.csv "$R/real4.csv" 2>/dev/null
cut -d, -f1,8,18 "$R/host2.csv" "$R/host4.csv" 2>/dev/null | column -ts, | head -60
tail -20 /tmp/real4.log
echo "total $(( $(date +%s) - t0 )) s"
