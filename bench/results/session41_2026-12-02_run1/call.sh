set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
# Variant 16 (15 + the K multicast in a cluster of two): op tests at 15 and 16 (bits vs 10), the runner's v16-vs-v15 bits.
(cd /tmp && DS_TEST_SM90_VARIANTS=fg timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaRunner.DummyV3DecodeSm90MulticastBitEqual' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "variant 1[56] vs 10:" $R/tests.log | awk '{print $3, $6, $7}' | sort | uniq -c | head
grep -E "sm90_v16_vs_v15" $R/tests.log | cut -c1-170
tail -5 $R/tests.log | cut -c1-200
gzip -f $R/tests.log
# A/B 15 vs 16 at every 128-head anchor, per-CTA clocks.
DS_BENCH_SM90_VARIANTS=15,16 DS_BENCH_SM90_BALANCED=15,16 DS_BENCH_SM90_QBF16=15,16 DS_BENCH_MLA_CTA_TIMES=1 \
  timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 150 --out $R/b > $R/b.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\| case|^\| h" $R/b/kernels.md | head -12
grep -E "^cta-times" $R/b.log | grep -E "wave 0|span" | cut -c1-220 | head -60
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
