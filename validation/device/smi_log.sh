# Sourced by a device batch after gpu_workdir.sh: the GPUs' identity in $R/gpus.csv, then their SM clock,
# power, temperature and power-cap flag every 0.1 s in $R/smi.csv until the batch exits ($SMI: the logger).
nvidia-smi --query-gpu=index,name,uuid,serial,power.limit,clocks.max.sm,vbios_version --format=csv > "$R/gpus.csv"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader,nounits -lms 100 > "$R/smi.csv" 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
