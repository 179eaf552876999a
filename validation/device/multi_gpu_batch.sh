#!/usr/bin/env bash
# Device batches of the multi-GPU issues on one 4-GPU host (run from the repository root, $OUT set):
#
#   STEP=1  NCCL collectives in groups of 2 and 4 (all GPUs, alone on the host), then, side by side,
#           the hf operators at tensor-parallel shapes (`trainsim calibrate --ops hf --hf-tp`) on GPU 3
#           and validation/train_hf_parallel.py on GPUs 0-1 (1gpu, then dp2 tp2 pp2 fsdp2), then the
#           compute-communication interference benchmark on GPUs 0-1.
#   STEP=2  validation/train_hf_parallel.py on all four GPUs (dp4 tp4 pp4 fsdp4 fsdp2xtp2 pp2xtp2).
#   STEP=3  the same layouts on tiny shapes (validation/hf_parallel_shapes_host.csv: the runtimes' host
#           cost, GPU work negligible), then on held-out shapes (hf_parallel_shapes_heldout.csv).
#
# Every piece writes under /tmp/mgpu (resumable: re-running a step on the same warm machine skips what is
# done) and the whole folder comes back as $OUT/mgpu-step<N>.tar.gz with a short summary printed last.
# NVLink multicast stays off in every process (the variables are exported and on each torchrun line).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
STEP=${STEP:-1}; W=/tmp/mgpu; R=${OUT:-out}
mkdir -p "$W" "$R"
t0=$(date +%s)
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$W/gpus.csv" 2>&1
python3 -c 'import torch, transformers; print(torch.__version__, torch.cuda.nccl.version(), transformers.__version__)' \
  > "$W/versions.txt" 2>&1
if [ "$STEP" = 1 ]; then
  OUT=$W/collectives WORK=/tmp/coll NPROC=4 COLL_GROUPS=2,4 BUDGET_S=100 \
    bash validation/device/collectives_4gpu.sh > "$W/collectives.log" 2>&1
  echo "collectives done at $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=3 timeout 330 python3 -m trainsim calibrate --out "$W/calib_hf_tp" --ops hf --hf-tp \
    --points 128 --seed 1 --time-budget 270 -q > "$W/calib.log" 2>&1 &
  cal=$!
  CUDA_VISIBLE_DEVICES=0,1 OUT=$W/hf2 WORK=/tmp/hf2 NPROC=2 LAYOUTS=dp2,tp2,pp2,fsdp2 BUDGET_S=260 KERNELS=1 \
    bash validation/device/hf_parallel.sh > "$W/hf2.log" 2>&1
  wait $cal; echo "calibrate exit $?"
  echo "hf 2-GPU and calibration done at $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=0,1 OUT=$W NPROC=2 BUDGET_S=80 WORK=/tmp/interf \
    bash validation/device/interference.sh > "$W/interference.log" 2>&1
  echo "interference done at $(( $(date +%s) - t0 )) s"
elif [ "$STEP" = 3 ]; then
  # the runtimes' host (CPU) cost: tiny shapes whose GPU work is negligible, every layout of 1, 2 and 4 GPUs;
  # then held-out shapes (used for nothing but the comparison) on 2 and 4 GPUs
  CUDA_VISIBLE_DEVICES=0,1 OUT=$W/host2 WORK=/tmp/host2 NPROC=2 LAYOUTS=dp2,tp2,pp2,fsdp2 SHAPES=validation/hf_parallel_shapes_host.csv \
    BUDGET_S=100 bash validation/device/hf_parallel.sh > "$W/host2.log" 2>&1
  OUT=$W/host4 WORK=/tmp/host4 NPROC=4 SHAPES=validation/hf_parallel_shapes_host.csv BUDGET_S=100 \
    bash validation/device/hf_parallel.sh > "$W/host4.log" 2>&1
  echo "host runs done at $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=0,1 OUT=$W/held2 WORK=/tmp/held2 NPROC=2 LAYOUTS=dp2,tp2,pp2,fsdp2 \
    SHAPES=validation/hf_parallel_shapes_heldout.csv BUDGET_S=120 bash validation/device/hf_parallel.sh > "$W/held2.log" 2>&1
  OUT=$W/held4 WORK=/tmp/held4 NPROC=4 SHAPES=validation/hf_parallel_shapes_heldout.csv BUDGET_S=150 \
    bash validation/device/hf_parallel.sh > "$W/held4.log" 2>&1
  echo "held-out runs done at $(( $(date +%s) - t0 )) s"
elif [ "$STEP" = 2 ]; then
  OUT=$W/hf4 WORK=/tmp/hf4 NPROC=4 BUDGET_S=${BUDGET_S:-470} KERNELS=1 \
    bash validation/device/hf_parallel.sh > "$W/hf4.log" 2>&1
  echo "hf 4-GPU done at $(( $(date +%s) - t0 )) s"
fi
tar czf "$R/mgpu-step$STEP.tar.gz" -C "$W" .
echo "== versions"; cat "$W/versions.txt"; head -3 "$W/gpus.csv"
for f in collectives.log hf2.log hf4.log interference.log calib.log host2.log host4.log held2.log held4.log; do
  [ -f "$W/$f" ] && { echo "== $f"; tail -25 "$W/$f"; }
done
echo "total $(( $(date +%s) - t0 )) s"
