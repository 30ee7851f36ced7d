set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
# v13 op tests (quick), then the ring kernel's timeline + per-CTA clocks on the 128-head anchors.
DS_TEST_SM90_VARIANTS=d timeout 60 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1
echo "tests rc=$? $(grep -E 'PASSED|FAILED' $R/tests.log | head -3 | tr '\n' ' ')"
DS_BENCH_SM90_VARIANTS=13 DS_BENCH_SM90_BALANCED=13 DS_BENCH_MLA_TIMELINE=1 DS_BENCH_MLA_CTA_TIMES=1 timeout 150 $B/dsinfer bench kernels --only ceilings mla_sm90 --budget-s 120 --commit $(cat $B/COMMIT) --out $R/mla > $R/mla.log 2>&1
echo "mla rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^timeline|cta-times .* wave 0" $R/mla.log | cut -c1-1500
grep -E "^Ceilings|^\| case|^\| (h|16|128)" $R/mla/kernels.md | head -30
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
