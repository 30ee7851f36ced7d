set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=0cdf timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaMlaDecode.*:CudaRunner.DummyV3DecodeSm90QBf16BitEqual' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "q_bf16 vs q:" $R/tests.log | awk '{print $5, $7}' | sort | uniq -c
grep -E "q_bf16 vs q: differing" $R/tests.log | cut -c1-170
gzip -f $R/tests.log
# The bench's table (run sets) and the ring kernel's pick (plain, timeline), one anchor.
DS_BENCH_SM90_VARIANTS=13,15 DS_BENCH_SM90_BALANCED=15 DS_BENCH_SM90_QBF16=15 DS_BENCH_MLA_TIMELINE=1 DS_BENCH_MLA_ANCHOR="h128 b64 4K" \
  timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 60 --out $R/b > $R/b.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\| case|^\| h128" $R/b/kernels.md | head -3
grep -E "^timeline.*wg0:" $R/b.log | cut -c1-200
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
