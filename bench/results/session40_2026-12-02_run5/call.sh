set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=df timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "l2 prefetch vs none:" $R/tests.log | awk '{print $6}' | sort | uniq -c
gzip -f $R/tests.log
# A/B: a short CTA's tiles prefetched into L2 (sm90_l2_prefetch 0 / 16), v15 with bf16 q, plain and balanced, interleaved; per-CTA clocks.
for rep in 1 2; do
  DS_BENCH_SM90_VARIANTS=none DS_BENCH_SM90_BALANCED=15 DS_BENCH_SM90_QBF16=15 DS_BENCH_SM90_L2PF=0,16 DS_BENCH_MLA_ANCHOR=h128 DS_BENCH_MLA_CTA_TIMES=$(( rep == 1 )) \
    timeout 150 $B/dsinfer bench kernels --only mla_sm90 --budget-s 110 --out $R/ab$rep > $R/ab$rep.log 2>&1
  echo "ab$rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^mla_decode_sm90\[3wg,ring3" $R/ab$rep.log | grep -E "h128" | sed -e 's/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | awk '{$NF=""; print}' | cut -c1-110
done
grep "cta-times" $R/ab1.log | grep -E "wave 0:" | grep -E "h128 (b1 32K|b64 half)" | sed -e 's/cycles mean/cyc/' | cut -c1-230
# The timeline of a b1 x 32K CTA, with and without the prefetch.
DS_BENCH_SM90_VARIANTS=none DS_BENCH_SM90_BALANCED=none DS_BENCH_SM90_QBF16=15 DS_BENCH_SM90_L2PF=0,16 DS_BENCH_MLA_TIMELINE=1 \
  DS_BENCH_MLA_ANCHOR="b1 32K" timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 50 --out $R/tl > $R/tl.log 2>&1
echo "tl rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^timeline.*wg0:" $R/tl.log | cut -c1-400
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
