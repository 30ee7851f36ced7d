#!/usr/bin/env bash
# Nsight Compute on the sm_90a MLA decode kernels, one launch each, at the first anchor
# (h128 b128 x 4K) of `dsinfer bench kernels --only mla_sm90`: the default kernel
# (MlaDecodeSm90Kernel, variant 0), the three-warpgroup kernel (MlaDecodeSm90Wg3Kernel,
# variant 4) and its three-stage-ring form (MlaDecodeSm90Ring3Kernel, variant 13). Run on the GPU
# machine from the checkout, with .carry packed by scripts/gpu_carry.sh; writes $OUT/ncu_v<N>.txt.
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"  # B, LD_LIBRARY_PATH, NCU, SECTIONS, OUTDIR
for spec in "0:MlaDecodeSm90Kernel" "4:MlaDecodeSm90Wg3Kernel" "13:MlaDecodeSm90Ring3Kernel"; do
  v=${spec%%:*}; name=${spec#*:}
  DS_BENCH_SM90_VARIANTS=$v NCU_TIMEOUT_S=${NCU_TIMEOUT_S:-120} ncu_sections "$name" "v$v" -- --only mla_sm90 --budget-s 30
  echo "[ncu_mla_sm90] variant $v rc=$?"
done
# NCU_SOURCE=1: per-instruction stall samples of each kernel (ncu_source in ncu_common.sh) into
# $OUT/ncu_v<N>_source_top.txt, and the csv's first 3,000 bytes.
if [ -n "${NCU_SOURCE:-}" ]; then
  for spec in "0:MlaDecodeSm90Kernel" "4:MlaDecodeSm90Wg3Kernel" "13:MlaDecodeSm90Ring3Kernel"; do
    v=${spec%%:*}; name=${spec#*:}
    DS_BENCH_SM90_VARIANTS=$v NCU_TIMEOUT_S=${NCU_TIMEOUT_S:-120} ncu_source "$name" "v$v" -- --only mla_sm90 --budget-s 30
    echo "[ncu_mla_sm90] source variant $v rc=$? ($(wc -c < /tmp/ncu_src_v$v.csv) bytes of csv)"
    head -c 3000 /tmp/ncu_src_v$v.csv > "$OUTDIR/ncu_v${v}_source_head.csv"
  done
fi
