set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=0124589ab timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaRunner*Sm90*:CudaMlaDecode.*:CudaGroupedGemm*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head; grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
timeout 440 stdbuf -oL $B/dsinfer bench kernels --commit 1de2efc1 --budget-s 400 --out $R/full --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 > $R/full.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^ceilings|wrote|skipped" $R/full.log | head; ls -la $R/full
gzip -f $R/full.log
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
