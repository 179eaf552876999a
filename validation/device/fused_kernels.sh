#!/usr/bin/env bash
# Device batch (one H100): the fused operator kinds (training.kernels: fused; rope_fused,
# rmsnorm_fused, swiglu_fused, fp8_cast_fused, each compiled by torch.compile as the stand-in for
# Transformer Engine's fused kernels) at the published configurations' exact shapes, the eager kinds
# at the same shapes on the same GPU (an A/B), then the broad and the paper boxes; `more` (second
# argument, or after the first part with `all`) adds RoPE and SwiGLU at 224 more points. Run from the
# repository root with $OUT set; resumable. No install: torch comes with the machine. Multicast off.
# `rope` and `static` re-measure the fused kinds compiled per shape (static shapes;
# calibration/harness_fused.py says why): what the shipped profiles hold.
# `softmax` measures fused_softmax as Megatron's one fused kernel (compiled; calibration/harness_fused.py)
# over the paper box, which replaced the eager three-kernel samples in the shipped profiles;
# `attn_dropout` the attention-probability dropout kernel (model.attention_dropout) over the same box.
# Usage: bash validation/device/fused_kernels.sh [first|more|all|rope|rope_more|static|cast_transpose|softmax|attn_dropout|attn_dropout_more]   (default first)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. PYTHONUNBUFFERED=1
R=${OUT:-out}; W=${WORK:-/tmp/fused_kernels}
mkdir -p "$R" "$W"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$W/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$W/gpu.txt"
cal() {  # name, seconds, args...
  local name=$1 secs=$2; shift 2
  timeout "$secs" python3 -m trainsim calibrate --out "$W/$name" --max-gib 60 --time-budget $((secs - 30)) "$@" \
    > "$W/$name.log" 2>&1
  echo "$name exit $? at $(( $(date +%s) - t0 )) s: $(($(wc -l < "$W/$name/compute.csv" 2>/dev/null || echo 1) - 1)) rows"
}
# --gpu-time: the kernels alone (a compiled function's Python wrapper costs 100-200 us of host time
# a call, which the CPU hides in training as it runs ahead; TE calls its kernels from C++)
PART=${1:-first}
if [ "$PART" = rope ]; then
  cal rope_published 150 --configs validation/configs_published.csv --budget 28 --ops rope_fused --seed 3 --gpu-time
  cal rope_paper 200 --box paper --points 48 --ops rope_fused --seed 12 --gpu-time
  cal rope_broad 200 --box broad --points 40 --ops rope_fused --seed 11 --gpu-time
  PART=none
fi
if [ "$PART" = rope_more ]; then  # RoPE's four features need more points than one rope run gives
  cal rope_paper_more 250 --box paper --points 160 --ops rope_fused --seed 31 --gpu-time
  cal rope_broad_more 250 --box broad --points 120 --ops rope_fused --seed 32 --gpu-time
  PART=none
fi
if [ "$PART" = cast_transpose ]; then  # fp8_cast_fused as TE runs it on Hopper: cast and transposed copy
  cal ct_published 120 --configs validation/configs_published.csv --budget 29 --ops fp8_cast_fused --seed 3 --gpu-time
  cal ct_paper 170 --box paper --points 16 --ops fp8_cast_fused --seed 41 --gpu-time
  cal ct_broad 150 --box broad --points 12 --ops fp8_cast_fused --seed 42 --gpu-time
  PART=none
fi
if [ "$PART" = softmax ]; then
  cal softmax_mk "${SOFTMAX_SECS:-520}" --box paper --points 160 --ops fused_softmax --seed 51 --gpu-time
  PART=none
fi
if [ "$PART" = attn_dropout ]; then  # Megatron's attention-probability dropout (torch dropout, eager)
  cal attn_dropout_paper "${DROPOUT_SECS:-150}" --box paper --points 160 --ops attn_dropout --seed 52 --gpu-time
  PART=none
fi
if [ "$PART" = attn_dropout_more ]; then  # 160 points left its forward at 21-23 % validation error
  cal attn_dropout_more "${DROPOUT_SECS:-150}" --box paper --points 480 --ops attn_dropout --seed 53 --gpu-time
  PART=none
fi
if [ "$PART" = static ]; then
  cal static_published 150 --configs validation/configs_published.csv --budget 55 --ops swiglu_fused,fp8_cast_fused --seed 3 --gpu-time
  cal static_paper 190 --box paper --points 24 --ops swiglu_fused,fp8_cast_fused --seed 12 --gpu-time
  cal static_broad 190 --box broad --points 20 --ops swiglu_fused,fp8_cast_fused --seed 11 --gpu-time
  PART=none
fi
if [ "$PART" = first ] || [ "$PART" = all ]; then
  cal published_ab 150 --configs validation/configs_published.csv --budget 218 --ops fused,rope,rmsnorm,swiglu,fp8_cast --seed 3 --gpu-time
  cal broad_fused 170 --box broad --points 40 --ops fused --seed 11 --gpu-time
  cal paper_fused 150 --box paper --points 48 --ops fused --seed 12 --gpu-time
fi
if [ "$PART" = more ] || [ "$PART" = all ]; then
  cal broad_more 120 --box broad --points 96 --ops rope_fused,swiglu_fused --seed 21 --gpu-time
  cal paper_more 100 --box paper --points 128 --ops rope_fused,swiglu_fused --seed 22 --gpu-time
fi
tar -C "$W" -czf "$R/fused_kernels.tgz" .
python3 - "$W" <<'PY'
import csv, sys, collections, glob, os
for d in sorted(glob.glob(sys.argv[1] + "/*/compute.csv")):
    rows = list(csv.DictReader(open(d)))
    c = collections.Counter((r["op"], r["direction"]) for r in rows)
    print(os.path.basename(os.path.dirname(d)), len(rows), dict(c))
PY
for f in "$W"/*.log; do tail -n 2 "$f"; done
