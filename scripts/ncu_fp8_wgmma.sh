#!/usr/bin/env bash
# Nsight Compute on our FP8 wgmma GEMMs (fp8_gemm_wgmma_sm90.h), one launch each, at the first
# shape of `dsinfer bench kernels --only fp8_large` that runs them: the 128 x 144 tile form at
# kv_a_proj_with_mqa M4096 (Fp8GemmTile144Kernel) and the panel form at kv_b_proj M4096
# (Fp8GemmPanelKernel). Run on the GPU machine from the checkout, with .carry packed by
# scripts/gpu_carry.sh; writes $OUT/ncu_<name>.txt, and with NCU_SOURCE=1 the 40 instructions with
# the most stall samples ($OUT/ncu_<name>_source_top.txt, bench/ncu_source_top.py).
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"  # B, LD_LIBRARY_PATH, NCU, SECTIONS, OUTDIR
for name in ${NCU_KERNELS:-Fp8GemmTile144Kernel Fp8GemmPanelKernel}; do
  timeout ${NCU_TIMEOUT_S:-150} $NCU --clock-control none --kernel-name "regex:$name" \
    --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes $SECTIONS \
    $B/dsinfer bench kernels --only fp8_large --budget-s 60 --out /tmp/ncu_kk > "$OUTDIR/ncu_$name.txt" 2>&1
  echo "[ncu_fp8_wgmma] $name rc=$?"
  if [ -n "${NCU_SOURCE:-}" ]; then
    rm -f /tmp/ncu_src_$name.ncu-rep
    timeout ${NCU_TIMEOUT_S:-150} $NCU --clock-control none --kernel-name "regex:$name" \
      --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes --section SourceCounters --section WarpStateStats \
      --import-source yes -o /tmp/ncu_src_$name $B/dsinfer bench kernels --only fp8_large --budget-s 60 \
      --out /tmp/ncu_kk > /tmp/ncu_src_$name.log 2>&1
    $NCU --import /tmp/ncu_src_$name.ncu-rep --page source --csv --print-source sass > /tmp/ncu_src_$name.csv 2>&1
    python3 bench/ncu_source_top.py /tmp/ncu_src_$name.csv 40 > "$OUTDIR/ncu_${name}_source_top.txt" 2>&1
    echo "[ncu_fp8_wgmma] source $name rc=$?"
  fi
done
