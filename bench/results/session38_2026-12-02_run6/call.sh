set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=cde timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "vs 10:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
for rep in 1 2; do
  V=10,12,13,14; [ $rep = 2 ] && V=14,13,12,10
  CT=0; [ $rep = 1 ] && CT=1
  DS_BENCH_SM90_VARIANTS=$V DS_BENCH_SM90_BALANCED=13,14 DS_BENCH_MLA_CTA_TIMES=$CT timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 180 --out $R/mla_$rep > $R/mla_$rep.log 2>&1
  echo "mla $rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^\| case|^\| (h|16|128|warm)" $R/mla_$rep/kernels.md | head -20
done
grep "cta-times" $R/mla_1.log | grep "wave 0" | grep "b128 4K v\|b64 4K v\|b1 32K" | head -40
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
