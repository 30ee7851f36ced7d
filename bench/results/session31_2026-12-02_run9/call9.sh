set -uo pipefail
T0=$(date +%s)
R=$OUT/c9; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaLmHeadArgmax.*:CudaRunnerLmHeadArgmax.*:CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.SpecializeBitIdentical:CudaRunnerAttnPersistent.MoeSpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10; grep -E "_norm rep=0|lm_head_norm graphs" $R/tests.log | cut -c1-170
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob v2_1k "$V2 --input-len 1024"; ob v2_4k "$V2 --input-len 4096"
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
echo "total $(( $(date +%s) - T0 ))s"
