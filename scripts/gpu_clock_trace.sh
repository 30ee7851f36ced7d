#!/usr/bin/env bash
# On the GPU machine: runs a command with nvidia-smi sampling the SM clock, power and temperature
# every SAMPLE_MS [50] ms, and prefixes each line the command prints with a Unix timestamp, so
# the samples can be matched to the lines printed around them. Usage:
#   bash scripts/gpu_clock_trace.sh OUT_PREFIX command args...
# Writes OUT_PREFIX.smi.csv and OUT_PREFIX.log.
set -uo pipefail
P=$1; shift
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms "${SAMPLE_MS:-50}" > "$P.smi.csv" 2>&1 &
SMI=$!
sleep 0.3
"$@" 2>&1 | while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done > "$P.log"
rc=${PIPESTATUS[0]}
sleep 0.3
kill $SMI 2>/dev/null
wait $SMI 2>/dev/null
exit $rc
