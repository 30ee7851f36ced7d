set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
# Variant 15 (lean softmax) vs 13: op tests (bit-equality vs variant 10 asserted), timeline of both at the
# 128-head anchors, then two A/B passes.
DS_TEST_SM90_VARIANTS=df timeout 90 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | head -3 | tr '\n' ' ')"
grep -E "variant 15 vs 10" $R/tests.log | head -20
for v in 13 15; do
DS_BENCH_SM90_VARIANTS=$v DS_BENCH_SM90_BALANCED=none DS_BENCH_MLA_TIMELINE=1 DS_BENCH_MLA_CTA_TIMES=1 timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 60 --commit $(cat $B/COMMIT) --out $R/tl$v > $R/tl$v.log 2>&1
grep -E "^timeline h128 b128 4K v1. wg|cta-times h128 b64 4K v.. wave 0|cta-times h128 b128 4K q2 v.. wave 0|cta-times h128 b128 4K v.. wave 0" $R/tl$v.log | head -12 | cut -c1-400
done
for pass in 1 2; do
DS_BENCH_SM90_VARIANTS=13,15 DS_BENCH_SM90_BALANCED=13,15 timeout 150 $B/dsinfer bench kernels --only ceilings mla_sm90 --budget-s 120 --commit $(cat $B/COMMIT) --out $R/ab$pass > $R/ab$pass.log 2>&1
echo "ab$pass rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^Ceilings|^\| case|^\| (h|16|128)" $R/ab$pass/kernels.md | head -12
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
