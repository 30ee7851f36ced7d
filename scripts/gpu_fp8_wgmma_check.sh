#!/usr/bin/env bash
# One device call for our FP8 wgmma GEMMs (fp8_gemm_wgmma_sm90.h), from the checkout with .carry
# packed by scripts/gpu_carry.sh: their op tests (CudaFp8GemmWgmmaSm90.*) and
# `dsinfer bench kernels --only fp8_large` at kv_a / kv_b through scripts/gpu_e2e.sh, then
# REPS more bench repetitions (default 2) and Nsight Compute on the kernels in NCU_KERNELS (mangled
# names, e.g. Fp8GemmPanelKernelILi3ELb1; default none). Everything goes into $OUT/fp8_wgmma.tgz
# (the device tool brings back only a few files).
set -uo pipefail
R=/tmp/fp8w_out
rm -rf $R && mkdir -p $R
export DS_BENCH_FP8_LARGE_PROJS=${DS_BENCH_FP8_LARGE_PROJS:-kv_a_proj_with_mqa,kv_b_proj}
OUT=$R E2E_TESTS=1 E2E_TESTS_FILTER='CudaFp8GemmWgmmaSm90.*' E2E_TESTS_TIMEOUT_S=200 E2E_KERNELS=1 KERNELS_ONLY="${KERNELS_ONLY:-fp8_large}" \
  KERNELS_BUDGET_S=90 E2E_MODELS=v2-lite E2E_STAGES=none PROFILE_MODELS=none SCRIPT_LIMIT_S=300 \
  bash scripts/gpu_e2e.sh > $R/gpu_e2e.log 2>&1
echo "[fp8w] gpu_e2e rc=$?"
B=/tmp/dsinfer_e2e/bin
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
# The device call's limit is 600 s: later steps run only while there is time left (the tarball is
# written last).
left() { [ "$SECONDS" -lt "$1" ] || { echo "[fp8w] skipping $2: ${SECONDS} s used"; return 1; }; }
for i in $(seq 1 ${REPS:-2}); do
  left 420 "rep $i" || break
  LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}" \
    $B/dsinfer bench kernels --only ${KERNELS_ONLY:-fp8_large} --budget-s 90 --out $R/rep$i > $R/rep$i.log 2>&1
  echo "[fp8w] rep $i rc=$?"
done
for k in ${NCU_KERNELS:-}; do
  left 380 "ncu $k" || break
  OUT=$R NCU_NAME_BASE=mangled NCU_KERNELS=$k NCU_TIMEOUT_S=$(( 540 - SECONDS < 150 ? 540 - SECONDS : 150 )) \
    bash scripts/ncu_fp8_wgmma.sh
done
grep -h "fp8_gemm_wgmma\|PASSED\|FAILED" $R/cuda_tests_summary.txt 2>/dev/null | grep -c PASS | sed 's/^/[fp8w] metric PASS lines: /'
grep -h "FAILED\|PASSED" $R/cuda_tests_summary.txt 2>/dev/null | tail -3
tar -C $R -czf $OUT/fp8_wgmma.tgz .
