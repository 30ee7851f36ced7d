set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
# Op tests of variants 10 and 12 (12 also against 10 at 1e-5, with the count of differing bits).
(cd /tmp && DS_TEST_SM90_VARIANTS=ac timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "variant 12 vs 10" $R/tests.log | head -30
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
# The anchors, variants 10 and 12 (plain and balanced), twice; per-CTA clocks in the first pass.
for rep in 1 2; do
  CT=0; [ $rep = 1 ] && CT=1
  DS_BENCH_SM90_VARIANTS=10,12 DS_BENCH_SM90_BALANCED=10,12 DS_BENCH_MLA_CTA_TIMES=$CT timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 180 --out $R/mla_$rep > $R/mla_$rep.log 2>&1
  echo "mla $rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^\| (h|16|128|warm)" $R/mla_$rep/kernels.md | head -20
done
grep "cta-times" $R/mla_1.log | head -40
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
