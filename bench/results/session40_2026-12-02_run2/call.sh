set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=cdf timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "prologue [12] vs 0:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
grep -E "q_bf16 vs q:" $R/tests.log | awk '{print $5, $7}' | sort | uniq -c
gzip -f $R/tests.log
# A/B: the ring kernel's prologue orders 0 / 1 / 2 (interleaved per anchor), fp32 and bf16 q, per-CTA clocks; twice.
for rep in 1 2; do
  DS_BENCH_SM90_VARIANTS=15 DS_BENCH_SM90_BALANCED=none DS_BENCH_SM90_QBF16=15 DS_BENCH_SM90_PROLOGUE=0,1,2 DS_BENCH_MLA_CTA_TIMES=$(( rep == 1 )) \
    timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 150 --out $R/ab$rep > $R/ab$rep.log 2>&1
  echo "ab$rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^mla_decode_sm90\[3wg,ring3" $R/ab$rep.log | grep -E "h128" | sed -e 's/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | awk '{$NF=""; print}' | cut -c1-120
done
grep "cta-times" $R/ab1.log | grep -E "wave [01]:" | grep -E "h128 (b128 4K|b1 32K|b64 4K)" | sed -e 's/cycles mean/cyc/' | cut -c1-260
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
