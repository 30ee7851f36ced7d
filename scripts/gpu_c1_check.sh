#!/usr/bin/env bash
# Issue 7's concurrency-1 point on the GPU machine, in one device call (carry [".carry"] packed by
# scripts/gpu_carry.sh; run from the checkout's root): bench/gpu_rates.py (the read rate the sweep's
# e2e.json uses, and ANCHORS.md's copy ceiling), then `dsinfer bench one-batch` at batch 1 x 1K and
# 4K for V2-Lite (27 layers, dummy BF16) and V3 (8 layers, dummy FP8), C1_ROUNDS [2] times each,
# then bench/c1_table.py: each step against its roofline at both rates (1.5x at the read rate is
# the acceptance). C1_EXTRA: more runs for A/B in the same call, ';'-separated
# "name|ENV=V ...|model|input_len" (model v2 or v3), e.g. "v3split_1k|DS_COMBINE_NORM_SPLIT=8|v3|1024".
# Output in $OUT/c1check: gpu_rates.json, ob_<name>.{json,log}, c1_table.md (also printed).
set -uo pipefail
R=${OUT:-/tmp/c1_out}/c1check
. scripts/gpu_call_setup.sh
python3 bench/gpu_rates.py --output-file "$R/gpu_rates.json" > "$R/gpu_rates.txt" 2>&1 || echo "gpu_rates.py failed: $R/gpu_rates.txt"
c1_args() {  # model input_len -> one-batch args
  case $1 in
    v2) echo "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len $2" ;;
    v3) echo "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len $2" ;;
  esac
}
for i in $(seq 1 "${C1_ROUNDS:-2}"); do
  for m in v2 v3; do
    for L in 1024 4096; do ob "${m}_${L}_$i" "$(c1_args $m $L)"; done
  done
done
IFS=';' read -ra EXTRA <<< "${C1_EXTRA:-}"
for ex in "${EXTRA[@]}"; do
  [ -z "$ex" ] && continue
  IFS='|' read -r name envs m L <<< "$ex"
  # shellcheck disable=SC2086
  ob "$name" "$(c1_args "$m" "$L")" $envs
done
python3 bench/c1_table.py "$R" --out "$R/c1_table.md"
