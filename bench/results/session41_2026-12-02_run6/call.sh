set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
# The full run (the new kernels.json / kernels.md), the sm90 anchors also timed by ANCHORS.md's method.
DS_BENCH_SM90_VARIANTS=0,15,16 DS_BENCH_SM90_BALANCED=15,16 DS_BENCH_SM90_QBF16=15,16 DS_BENCH_MLA_ANCHOR_METHOD=1 \
  timeout 570 $B/dsinfer bench kernels --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 --budget-s 470 --commit $(cat $B/COMMIT) --out $R/full > $R/full.log 2>&1
echo "full rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^Ceilings" $R/full/kernels.md; grep -E "^ceilings" $R/full.log
grep -c '"kernel"' $R/full/kernels.json
grep -iE "skipped" $R/full/kernels.md | head -5 | cut -c1-300
grep -E "^\| case|^\| h" $R/full/kernels.md | head -20 | cut -c1-400
awk '/timed as ANCHORS.md/{f=1} f&&/^\| h/{print} f&&/^Mixed|^## All/{exit}' $R/full/kernels.md | sed 's/mla_decode_sm90//; s/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | head -80
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
