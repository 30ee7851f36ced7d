set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=cdf timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10
grep -E "vs 10:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
gzip -f $R/tests.log
# The full kernels run (kernels.json) at this commit: MLA variants 0, 10-13, 15 and balanced 10, 13, 15, per-CTA clocks.
DS_BENCH_MLA_CTA_TIMES=1 timeout 500 $B/dsinfer bench kernels --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 --budget-s 400 --commit 7acb91d8 --out $R/full > $R/full.log 2>&1
echo "full rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $R/full.log
grep -E "^Ceilings|^\| case|^\| (h|16|128)" $R/full/kernels.md | head -12
grep "cta-times" $R/full.log | grep "wave 0" | grep -E "b128 4K v1[35]|b64 4K v1[35]|q2 v1[35]" | cut -c1-200
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
