#!/usr/bin/env bash
# Device batch for a 2-GPU call that may land on H200s or H100s (nvidia-h200-x2 runs on either).
#   H200: issue 9's H200 operator samples and single-GPU validation runs (validation/device/broad_profile.sh),
#         split over the two GPUs (STEPS=a on GPU 0, STEPS=b on GPU 1), into $OUT/a and $OUT/b.
#   H100: one more machine for the host fit and an unseen-machine check of issue 12: every 2-GPU layout on
#         the tiny shapes (validation/device/host_tiny.sh) and on the two machine shapes
#         (validation/hf_parallel_shapes_machine.csv); $OUT/host2.csv and $OUT/real2.csv.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); NG=$(nvidia-smi -L | wc -l)
echo "GPUs: $NG x $NAME"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$R/gpus.csv" 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > "$R/cpu.txt" 2>&1
case "$NAME" in
  *H200*)
    if [ "$NG" -ge 2 ]; then
      # RESUME_A / RESUME_B: the halves' earlier copies in the repository (validation/broad_h200/a, b)
      ( CUDA_VISIBLE_DEVICES=0 STEPS=a OUT=$R/a WORK=/tmp/broadA RESUME_FROM_h200=${RESUME_A:-} \
          bash validation/device/broad_profile.sh > "$R/a.log" 2>&1
        # GPU 0 then measures the third unseen set (validation/configs_unseen3.csv) on this GPU
        [ -f "$R/measured_unseen3_h200.csv" ] || CUDA_VISIBLE_DEVICES=0 timeout $(( ${DEADLINE_S:-530} - ($(date +%s) - t0) )) \
          python3 validation/train_gptneox.py --configs validation/configs_unseen3.csv --time-budget 200 \
          --out "$R/measured_unseen3_h200.csv" > "$R/train_unseen3.log" 2>&1 ) &
      CUDA_VISIBLE_DEVICES=1 STEPS=b OUT=$R/b WORK=/tmp/broadB RESUME_FROM_h200=${RESUME_B:-} \
        bash validation/device/broad_profile.sh > "$R/b.log" 2>&1
      wait
    else
      OUT=$R/a bash validation/device/broad_profile.sh > "$R/a.log" 2>&1
    fi
    tail -25 "$R/a.log"; tail -25 "$R/b.log" 2>/dev/null ;;
  *)
    [ -f /tmp/host2/measured.csv ] || OUT=$R bash validation/device/host_tiny.sh > /tmp/host_tiny.log 2>&1
    cp /tmp/host2/measured.csv "$R/host2.csv" 2>/dev/null
    echo "tiny done at $(( $(date +%s) - t0 )) s"
    OUT=$R/r2 WORK=/tmp/real2 NPROC=2 LAYOUTS=tp2,fsdp2,dp2,pp2 SHAPES=validation/hf_parallel_shapes_machine.csv \
      BUDGET_S=${REAL_BUDGET_S:-250} bash validation/device/hf_parallel.sh > /tmp/real2.log 2>&1
    cp /tmp/real2/measured.csv "$R/real2.csv" 2>/dev/null
    cut -d, -f1,8,18 "$R/host2.csv" 2>/dev/null | column -ts, | head -30
    tail -16 /tmp/real2.log ;;
esac
echo "total $(( $(date +%s) - t0 )) s"
