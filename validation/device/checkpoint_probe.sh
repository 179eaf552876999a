#!/usr/bin/env bash
# Device batch (one H100 or H200): the host cost of Hugging Face's gradient checkpointing
# (validation/probe_checkpoint.py): tiny host-bound shapes first, then x08, x06, x05 of the fourth
# unseen set, then tiny again (the machine's drift between the two). $OUT/checkpoint_*.jsonl.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1; nproc; lscpu | grep "Model name"
timeout 200 python3 validation/probe_checkpoint.py --tiny --out "$R/checkpoint_tiny.jsonl" 2>&1 | grep -v -i warn
timeout 200 python3 validation/probe_checkpoint.py --only x08,x06,x05 --out "$R/checkpoint_real.jsonl" 2>&1 | grep -v -i warn
timeout 150 python3 validation/probe_checkpoint.py --tiny --out "$R/checkpoint_tiny_again.jsonl" 2>&1 | grep -v -i warn
echo "total $(( $(date +%s) - t0 )) s"
