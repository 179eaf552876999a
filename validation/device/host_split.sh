#!/usr/bin/env bash
# Device batch (a 4-GPU host): validation/probe_host_split.py — the host's forward / backward / update
# issue time per layout (DDP, DTensor TP, FSDP2, FSDP2xTP) on tiny shapes and on real ones, and the
# iteration with the GPU drained after every phase. Rows go to /tmp/hsplit/split.jsonl (resumable: a
# re-run on the same warm machine skips the pairs done) and come back as $OUT/host_split.jsonl.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
W=/tmp/hsplit; R=${OUT:-out}; mkdir -p "$W" "$R"
SH=validation/hf_parallel_shapes_host.csv,validation/hf_parallel_shapes.csv,validation/hf_parallel_shapes_heldout.csv
ONLY=${ONLY:-host-L4-m4,host-L8-m4,d2048-L8,d3072-L8,d1024-L12}
t0=$(date +%s)
nvidia-smi --query-gpu=index,name --format=csv > "$R/gpus.csv" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > "$R/cpu.txt" 2>&1
probe() {  # NPROC LAYOUTS TIMEOUT
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( $1 - 1 ))) timeout "$3" python3 -m torch.distributed.run --standalone \
    --nproc-per-node "$1" validation/probe_host_split.py --layouts "$2" --shapes "$SH" --only "$ONLY" \
    --iters 4 --out "$W/split.jsonl" >> "$W/log-$1.txt" 2>&1
  echo "nproc $1 exit $? at $(( $(date +%s) - t0 )) s"
}
probe 2 tp2,fsdp2,dp2 230
probe 4 tp4,fsdp4,fsdp2xtp2,dp4 250
probe 1 1gpu 80
cp "$W/split.jsonl" "$R/host_split.jsonl" 2>/dev/null
for n in 1 2 4; do [ -f "$W/log-$n.txt" ] && { echo "== log $n"; grep -E "Error|error|min " "$W/log-$n.txt" | tail -25; }; done
cat "$R/cpu.txt"
echo "total $(( $(date +%s) - t0 )) s"
