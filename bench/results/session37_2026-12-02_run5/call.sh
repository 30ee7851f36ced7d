set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
OLD=/tmp/dsinfer_old; xz -dc .carry/dsinfer_old.xz > $OLD && chmod +x $OLD
(cd /tmp && DS_TEST_SM90_VARIANTS=0124589ab timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaRunner*Sm90*:CudaMlaDecode.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
# A/B: the previous binary (call 2, two-batch Q load) vs this one, alternating.
k=0
for order in "old new" "new old"; do for which in $order; do k=$((k+1))
  BIN=$([ $which = old ] && echo $OLD || echo $B/dsinfer)
  DS_BENCH_SM90_VARIANTS=0,10,11 DS_BENCH_SM90_BALANCED=10 timeout 100 $BIN bench kernels --only mla_sm90 --budget-s 80 --out $R/ab${k}_$which > /dev/null 2>&1
  echo "ab $k $which rc=$? $(( $(date +%s) - T0 ))s"
done; done
DS_BENCH_SM90_VARIANTS=10 DS_BENCH_MLA_CTA_TIMES=1 DS_BENCH_SM90_BALANCED=none timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 80 --out $R/ct > $R/ct.log 2>&1
echo "ct rc=$? $(( $(date +%s) - T0 ))s"; grep "cta-times" $R/ct.log | grep -E "wave 0|span" | cut -c1-200
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for r in 1 2; do
  obx old_1k_$r $OLD "$V3 --input-len 1024"; ob new_1k_$r "$V3 --input-len 1024"
  ob new_4k_$r "$V3 --input-len 4096"; obx old_4k_$r $OLD "$V3 --input-len 4096"
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
