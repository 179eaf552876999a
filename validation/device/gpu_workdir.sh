# Sourced by the one-GPU device batches after `set -u`: multicast off, $R (the results, $OUT), the
# deadline clock ($DEADLINE from DEADLINE_S, $t0), the GPU ($NAME, $G: h200 or h100) and the resumable
# work folder $W = ${WORK:-/tmp/$1}/$G, both created.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; DEADLINE=${DEADLINE_S:-500}; t0=$(date +%s)
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) G=h200 ;; *) G=h100 ;; esac
W=${WORK:-/tmp/$1}/$G; mkdir -p "$R" "$W"; echo "GPU: $NAME -> $W"
