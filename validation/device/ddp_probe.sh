#!/usr/bin/env bash
# Device batch (2 GPUs; NPROC=4: four, layout dp4): validation/probe_ddp.py — DDP's variants (no DDP, as measured, no buffer
# broadcast, gradient bucket views, a no-op comm hook, sync every micro-batch) on the two machine shapes;
# rows come back as $OUT/ddp_probe.jsonl.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; J=/tmp/ddp_probe.jsonl; t0=$(date +%s)
N=${NPROC:-2}
CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((N - 1))) timeout ${BUDGET_S:-520} python3 -m torch.distributed.run --standalone \
  --nproc-per-node $N validation/probe_ddp.py --layout dp$N --shapes ${SHAPE_CSV:-validation/hf_parallel_shapes_machine.csv} \
  --only ${SHAPES:-d2048-L8,d3072-L8} \
  --rounds ${ROUNDS:-2} --iters 6 --out $J > /tmp/ddp_probe.log 2>&1
cp $J "$R/ddp_probe.jsonl"; cp /tmp/ddp_probe.log "$R/ddp_probe.log"
grep -hE "Error| r[0-9] " /tmp/ddp_probe.log | tail -30
echo "total $(( $(date +%s) - t0 )) s"
