set -uo pipefail
T0=$(date +%s)
R=$OUT/c3; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=ac timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "variant 12 vs 10" $R/tests.log | awk '{print $1, $7}' | tr '\n' ' '; echo
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
for rep in 1 2; do
  CT=0; [ $rep = 1 ] && CT=1
  DS_BENCH_SM90_VARIANTS=10,12 DS_BENCH_SM90_BALANCED=10,12 DS_BENCH_MLA_CTA_TIMES=$CT timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 180 --out $R/mla_$rep > $R/mla_$rep.log 2>&1
  echo "mla $rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^\| (h|16|128|warm)" $R/mla_$rep/kernels.md | head -20
done
grep "cta-times" $R/mla_1.log | grep "wave 0" | head -40
# The runner: V3 8 layers, DS_MLA_DECODE_SM90_VARIANT 10 vs 12, batch 64 x 4K and batch 1 x 4K, interleaved.
V3="--model $B/data/deepseek-v3 --num-layers 8"
for r in 1 2; do for v in 10 12; do
  ob v3_b64_v${v}_$r "$V3 --batch-size 64 --input-len 4096" DS_MLA_DECODE_SM90_VARIANT=$v
  ob v3_b1_v${v}_$r "$V3 --batch-size 1 --input-len 4096" DS_MLA_DECODE_SM90_VARIANT=$v
done; done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
