set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=cd timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "vs 10:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
for rep in 1 2; do
  CT=0; [ $rep = 1 ] && CT=1
  DS_BENCH_SM90_VARIANTS=10,12,13 DS_BENCH_SM90_BALANCED=12,13 DS_BENCH_MLA_CTA_TIMES=$CT timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 180 --out $R/mla_$rep > $R/mla_$rep.log 2>&1
  echo "mla $rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^\| case|^\| (h|16|128|warm)" $R/mla_$rep/kernels.md | head -20
done
grep "cta-times" $R/mla_1.log | grep "wave 0" | grep "b128 4K v\|b64 4K v\|b1 32K" | head -40
# The full kernels run (kernels.json) at this commit, variants 0, 10-13 and balanced 10, 12, 13.
DS_BENCH_SM90_VARIANTS=0,10,11,12,13 DS_BENCH_SM90_BALANCED=10,12,13 timeout 420 $B/dsinfer bench kernels --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 --budget-s 380 --commit 376a75f1 --out $R/full > $R/full.log 2>&1
echo "full rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $R/full.log
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
