set -uo pipefail
R=/tmp/c10; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeSharedFused.*:CudaMultiDevice.*:CudaPdl.*:CudaPerf.*:CudaRmsNorm.*:CudaRope*:CudaRouterGemv.*:CudaSampling.*:CudaSiluAndMul.*:CudaSkinnyGemm*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|op=sample case" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|\[metric\] op=sample" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
tar -C $R -czf $OUT/call10.tgz .
