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
  ncu_sections "$name" "$name" -- --only fp8_large --budget-s 60
  echo "[ncu_fp8_wgmma] $name rc=$?"
  if [ -n "${NCU_SOURCE:-}" ]; then
    ncu_source "$name" "$name" -- --only fp8_large --budget-s 60
    echo "[ncu_fp8_wgmma] source $name rc=$?"
  fi
done
