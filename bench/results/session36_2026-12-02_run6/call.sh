set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head; grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for v in 10; do
DS_BENCH_MLA_ANCHOR="b1 32K" DS_BENCH_SM90_VARIANTS=$v DS_BENCH_SM90_BALANCED=none timeout 60 $NCU --clock-control none --cache-control none --kernel-name "regex:MlaDecodeSm90(Wg3)?Kernel|MlaDecodeSm90Combine" --launch-skip 12 --launch-count 16 --metrics gpu__time_duration.sum --csv --print-units base $B/dsinfer bench kernels --only mla_sm90 --budget-s 60 --out /tmp/nk > $R/ncu_b1_32k_v$v.csv 2>&1
echo "ncu v$v rc=$?"; python3 bench/ncu_summary.py $R/ncu_b1_32k_v$v.csv 2>&1 | head -8
done
DS_BENCH_MLA_ANCHOR="b1 32K" DS_BENCH_SM90_VARIANTS=0,10 DS_BENCH_SM90_BALANCED=none timeout 60 $B/dsinfer bench kernels --only mla_sm90 --budget-s 40 --out $R/b1 > $R/b1.log 2>&1; grep -E "^mla_decode_sm90" $R/b1.log | cut -c1-120
timeout 420 stdbuf -oL $B/dsinfer bench kernels --commit 6ab0d689 --budget-s 400 --out $R/full --only ceilings mla_anchors mla_sm90 mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_skinny fp8_large wgmma_probe fp8_gemv_experts gemv_experts_bf16 > $R/full.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^ceilings|wrote|skipped" $R/full.log | head; ls -la $R/full
gzip -f $R/full.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
