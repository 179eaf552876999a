#!/usr/bin/env bash
# Device batch for a 4-GPU call that may land on H200s or H100s (nvidia-h200-x4 runs on either).
#   H200: issue 9's H200 operator samples and single-GPU validation runs, split over GPUs 0 and 1
#         (validation/device/h200_or_machine.sh's H200 branch); $OUT/a, $OUT/b.
#   H100: one more 4-GPU machine: its host speed on the tiny shapes and every 4-GPU layout on the two
#         machine shapes (validation/device/host_and_real.sh); $OUT/host2.csv, host4.csv, real4.csv.
set -u
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in
  *H200*) bash validation/device/h200_or_machine.sh ;;
  *) bash validation/device/host_and_real.sh ;;
esac
