set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaFp8Gemv.*:CudaPdl.*:CudaRunnerPdl.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; grep "op=fp8_gemv_pdl" $R/tests.log; gzip -f $R/tests.log
timeout 240 stdbuf -oL $B/dsinfer bench kernels --only fp8_gemv_pdl --commit "$(cat $B/COMMIT)" --budget-s 200 --out $R/k > $R/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^ceilings|fp8_gemv_pdl" $R/bench.log | cut -c1-150
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
for r in 1 2; do ob v3_pdl0_$r "$V3" DS_PDL=0; ob v3_pdl1_$r "$V3" DS_PDL=1; done
echo "ob done $(( $(date +%s) - T0 ))s"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
