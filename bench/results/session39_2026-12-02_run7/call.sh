set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
# The final commit: op tests for 12, 13, 15 (fp32 and bf16 outputs bit-equal to variant 10), the rejection test,
# and the timeline path (variant 12 -> 13's schedule, and 15) at one anchor, under the launcher's checks.
(cd /tmp && DS_TEST_SM90_VARIANTS=cdf timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10
grep -E "vs 10:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
gzip -f $R/tests.log
DS_BENCH_MLA_ANCHOR="h128 b128 4K" DS_BENCH_SM90_VARIANTS=12,15 DS_BENCH_SM90_BALANCED=none DS_BENCH_MLA_TIMELINE=1 DS_BENCH_MLA_CTA_TIMES=1 timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 40 --commit 820d9e1c --out $R/tl > $R/tl.log 2>&1
echo "tl rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^timeline h128 b128 4K v1. wg0|cta-times h128 b128 4K v.. wave 0|^\| h128 b128 4K \||^\| case" $R/tl.log $R/tl/kernels.md | cut -c1-300
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
