#!/usr/bin/env bash
# Device batch: validation/probe_power_comm.py on every GPU of the host (the power cap's throttle when the
# GPU's other work is NCCL collectives instead of copies; ~4 min for one round of the default kernels).
# $OUT/power_comm.jsonl, nvidia-smi's view, the summary table last. ROUNDS=1, SUSTAIN_S=10, KERNELS=<list>.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$OUT/gpus.csv"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
lscpu | head -20 > "$OUT/cpu.txt"
timeout 540 env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  python3 -m torch.distributed.run --standalone --nproc-per-node "$N" validation/probe_power_comm.py \
  --out "$OUT/power_comm.jsonl" --rounds "${ROUNDS:-1}" --sustain-s "${SUSTAIN_S:-10}" \
  ${KERNELS:+--kernels "$KERNELS"} 2>&1 | grep -v "FutureWarning\|warnings.warn" | tail -40
