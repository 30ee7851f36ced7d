set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRouterRoute.*' > $R/tests_op.log 2>&1; echo "op tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_op.log)"; grep -c 'PASS$' $R/tests_op.log; grep -E 'FAIL$' $R/tests_op.log | head -5
grep timing $R/tests_op.log | head -40
cd - >/dev/null
EX=""
for i in 1 2 3; do
  for L in 1024 4096; do EX="$EX;fast_${L}_$i|DS_ROUTER_ROUTE_FAST=1|v3|$L;base_${L}_$i||v3|$L"; done
done
C1_ROUNDS=1 C1_EXTRA="$EX" bash scripts/gpu_c1_check.sh
echo "c1 done $(( $(date +%s) - T0 ))s"
cd /tmp && timeout 240 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerRouterRoute.*:CudaRunnerRouterGemv.*:CudaMoeRouting*:CudaRunnerFp8Gemv.*' > $R/tests_runner.log 2>&1; echo "runner tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_runner.log)"; grep -E '^\[  FAILED' $R/tests_runner.log | head
cd $OUT && tar czf c5.tgz c5 c1check && rm -rf c5 c1check
echo "total $(( $(date +%s) - T0 ))s"
