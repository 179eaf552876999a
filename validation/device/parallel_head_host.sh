#!/usr/bin/env bash
# Device batch: validation/probe_parallel_head_host.py, the host time of a micro-batch's head and tail in
# layers, for PROBE_LAYOUTS at the tiny host shapes (1gpu in one process, the others under torchrun with
# the processes of their world; a pipeline's stages each report their own end); then, on the same machine, train_hf_parallel.py's 1gpu and LAYOUTS rows at the tiny
# host shapes and at the GPU-bound shapes (the rows the head and tail are checked against).
#
#   NPROC=2 (or 4)                  GPUs of the parallel layouts
#   PROBE_LAYOUTS=1gpu,tp$NPROC     the probe's layouts (e.g. tp4,fsdp2xtp2 on four GPUs)
#   LAYOUTS=tp$NPROC                the rows' layouts
#   SKIP_ROWS=1                     the probe alone
#
# To $OUT: parallel_head_host.jsonl, host.csv and gpu_bound.csv (train_hf_parallel.py rows), logs.tgz,
# gpus.csv, topo.txt, cpu.txt (few files: the device returns a limited number). About 4 minutes for the
# defaults on two H200s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
NPROC=${NPROC:-2}; PROBE_LAYOUTS=${PROBE_LAYOUTS:-1gpu,tp$NPROC}; LAYOUTS=${LAYOUTS:-tp$NPROC}
R=${OUT:-out}; mkdir -p "$R"; t0=$(date +%s)
J="$R/parallel_head_host.jsonl"
lscpu > "$R/cpu.txt" 2>/dev/null
nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$R/gpus.csv" 2>/dev/null
nvidia-smi topo -m > "$R/topo.txt" 2>/dev/null
case ",$PROBE_LAYOUTS," in *,1gpu,*)
  timeout 150 python3 validation/probe_parallel_head_host.py --layouts 1gpu --out "$J" 2>&1 | grep -v "^\*\|OMP_NUM" ;;
esac
# each other layout with the processes its world takes (pp2 two, pp2xtp2 four), one torchrun per world
for world in 2 4 8; do
  mine=$(for l in $(echo "$PROBE_LAYOUTS" | tr , ' '); do
    [ "$l" = 1gpu ] && continue
    [ "$(python3 -c "import sys; sys.path.insert(0, 'validation'); import train_hf_parallel as t; print(t.parse_layout('$l').world)")" = "$world" ] && echo "$l"
  done | paste -sd, -)
  [ -n "$mine" ] && timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$world" \
    validation/probe_parallel_head_host.py --layouts "$mine" --out "$J" 2>&1 | grep -v "^\*\|OMP_NUM\|^W1"
done
echo "probe $(( $(date +%s) - t0 )) s"
[ "${SKIP_ROWS:-0}" = 1 ] && exit 0
OUT=/tmp/phh_out_host WORK=/tmp/phh_host NPROC=$NPROC LAYOUTS=$LAYOUTS SHAPES=validation/hf_parallel_shapes_host.csv \
  BUDGET_S=${HOST_BUDGET_S:-90} bash validation/device/hf_parallel.sh > /tmp/phh_host.log 2>&1
OUT=/tmp/phh_out_gb WORK=/tmp/phh_gb NPROC=$NPROC LAYOUTS=$LAYOUTS SHAPES=validation/hf_parallel_shapes_gpu_bound.csv \
  BUDGET_S=${GB_BUDGET_S:-120} bash validation/device/hf_parallel.sh > /tmp/phh_gb.log 2>&1
cp /tmp/phh_host/measured.csv "$R/host.csv"; cp /tmp/phh_gb/measured.csv "$R/gpu_bound.csv"
tar -czf "$R/logs.tgz" -C /tmp phh_out_host phh_out_gb phh_host.log phh_gb.log 2>/dev/null
tail -12 /tmp/phh_host.log; tail -16 /tmp/phh_gb.log
echo "total $(( $(date +%s) - t0 )) s"
