set -uo pipefail
T0=$(date +%s)
R=$OUT/c3; . scripts/gpu_call_setup.sh
COMMIT=$(cat $B/COMMIT)
(cd /tmp && DS_TEST_SM90_VARIANTS=0adf timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaRunner.DummyV3DecodeSm90QBf16BitEqual' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "q_bf16 vs q:" $R/tests.log | awk '{print $5, $7}' | sort | uniq -c
grep -E "q_bf16 vs q: differing" $R/tests.log | cut -c1-160
gzip -f $R/tests.log
# The full kernels run (kernels.json) at this commit: MLA variants 0, 10-13, 15, balanced 10, 13, 15, bf16-q 15 (plain, balanced), per-CTA clocks.
DS_BENCH_MLA_CTA_TIMES=1 timeout 500 $B/dsinfer bench kernels --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 --budget-s 400 --commit $COMMIT --out $R/full > $R/full.log 2>&1
echo "full rc=$? $(( $(date +%s) - T0 ))s"; tail -2 $R/full.log
grep -E "^Ceilings|^\| case|^\| (h|16|128)" $R/full/kernels.md | head -12
grep "cta-times" $R/full.log | grep "wave 0" | grep -E "h128 (b128 4K|b1 32K)( \[[a-z:0-9]+\])* v15" | sed -e 's/cycles mean/cyc/' | cut -c1-230
# The runner: V3 8 layers, mla_decode_q_bf16 off / on (default decode variants), batch 1 x 4K and 64 x 4K.
V3="--model $B/data/deepseek-v3 --num-layers 8"
for q in 0 1; do
  ob v3_b1_q$q "$V3 --batch-size 1 --input-len 4096" DS_MLA_DECODE_Q_BF16=$q
  ob v3_b64_q$q "$V3 --batch-size 64 --input-len 4096" DS_MLA_DECODE_Q_BF16=$q
done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
