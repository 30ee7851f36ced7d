#!/usr/bin/env bash
# Nsight Compute on the sm_90a MLA decode kernels, one launch each, at the first anchor
# (h128 b128 x 4K) of `dsinfer bench kernels --only mla_sm90`: the default kernel
# (MlaDecodeSm90Kernel, variant 0) and the three-warpgroup kernel (MlaDecodeSm90Wg3Kernel,
# variant 4). Run on the GPU machine from the checkout, with .carry packed by
# scripts/gpu_carry.sh; writes $OUT/ncu_v0.txt and $OUT/ncu_v4.txt.
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"  # B, LD_LIBRARY_PATH, NCU, SECTIONS, OUTDIR
for spec in "0:regex:MlaDecodeSm90Kernel" "4:regex:MlaDecodeSm90Wg3Kernel"; do
  v=${spec%%:*}; name=${spec#*:}
  DS_BENCH_SM90_VARIANTS=$v timeout ${NCU_TIMEOUT_S:-120} $NCU --clock-control none --kernel-name "$name" \
    --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes $SECTIONS \
    $B/dsinfer bench kernels --only mla_sm90 --budget-s 30 --out /tmp/ncu_kk > "$OUTDIR/ncu_v$v.txt" 2>&1
  echo "[ncu_mla_sm90] variant $v rc=$?"
done
# NCU_SOURCE=1: per-instruction stall samples (SourceCounters) of each kernel, exported from a
# saved report as the source page (SASS with source lines) and summarised by
# bench/ncu_source_top.py into $OUT/ncu_v<N>_source_top.txt (the 40 instructions with the most
# samples, with their stall reasons).
if [ -n "${NCU_SOURCE:-}" ]; then
  for spec in "0:regex:MlaDecodeSm90Kernel" "4:regex:MlaDecodeSm90Wg3Kernel"; do
    v=${spec%%:*}; name=${spec#*:}
    rm -f /tmp/ncu_src_v$v.ncu-rep
    DS_BENCH_SM90_VARIANTS=$v timeout ${NCU_TIMEOUT_S:-120} $NCU --clock-control none --kernel-name "$name" \
      --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes --section SourceCounters --section WarpStateStats \
      --import-source yes -o /tmp/ncu_src_v$v $B/dsinfer bench kernels --only mla_sm90 --budget-s 30 \
      --out /tmp/ncu_kk > /tmp/ncu_src_v$v.log 2>&1
    $NCU --import /tmp/ncu_src_v$v.ncu-rep --page source --csv --print-source sass > /tmp/ncu_src_v$v.csv 2>&1
    python3 bench/ncu_source_top.py /tmp/ncu_src_v$v.csv 40 > "$OUTDIR/ncu_v${v}_source_top.txt" 2>&1
    echo "[ncu_mla_sm90] source variant $v rc=$? ($(wc -c < /tmp/ncu_src_v$v.csv) bytes of csv)"
    head -c 3000 /tmp/ncu_src_v$v.csv > "$OUTDIR/ncu_v${v}_source_head.csv"
  done
fi
