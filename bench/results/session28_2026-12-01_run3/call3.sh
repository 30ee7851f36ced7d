set -uo pipefail
R=$OUT/c3; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_(p3|phase)" $R/timing.log | grep -E "wo_point=3 l2_fetch=1" | grep -v "stop_p1=1" | grep -E "p3|barrier 3" | sed 's/\[metric\] op=mla_attn_persistent_//; s/p1_pair=0 stop_p1=0 relaxed=0 //' | cut -c1-160
gzip -f $R/tests.log
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
