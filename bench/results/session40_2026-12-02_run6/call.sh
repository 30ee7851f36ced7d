set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=f timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "l2 prefetch vs none:" $R/tests.log | awk '{print $6}' | sort | uniq -c
gzip -f $R/tests.log
# A/B: the L2 prefetch of a short CTA's tiles 3.. once Q landed (sm90_l2_prefetch 0 / 16), v15 bf16 q, b1 x 32K and the mixed anchor; twice.
for a in "b1 32K" "h128 b64 half"; do for rep in 1 2; do
  n=$(echo "$a" | tr -d ' ')
  DS_BENCH_SM90_VARIANTS=none DS_BENCH_SM90_BALANCED=15 DS_BENCH_SM90_QBF16=15 DS_BENCH_SM90_L2PF=0,16 DS_BENCH_MLA_ANCHOR="$a" DS_BENCH_MLA_CTA_TIMES=$(( rep == 1 )) \
    timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 60 --out $R/ab_${n}_$rep > $R/ab_${n}_$rep.log 2>&1
  echo "ab $a $rep rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^mla_decode_sm90\[3wg,ring3" $R/ab_${n}_$rep.log | grep "q:bf16" | sed -e 's/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | cut -c1-110 | head -8
done; done
grep -h "cta-times" $R/ab_*_1.log | grep -E "wave 0:" | grep "q:bf16" | sed -e 's/cycles mean/cyc/' | cut -c1-230
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
