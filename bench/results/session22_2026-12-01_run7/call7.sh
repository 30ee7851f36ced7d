set -uo pipefail
R=/tmp/c7; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport:CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "moe_persistent_timing|stamps=0" $R/timing.log
grep -E "shared_done=132" $R/timing.log | grep phase
grep -E "ctx=1024 wo_point=3 gu=1 segment" $R/timing.log
tar -C $R -czf $OUT/call7.tgz .
