set -uo pipefail
R=/tmp/s25c7; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_timing.*stamps=0|ctx=1024 wo_point=3 l2_fetch=1 .*(start skew|p1 q)|op=mla_attn_persistent_p1 ctx=1024" $R/timing.log | sed 's/\[metric\] op=mla_attn_persistent_//'
tar -C $R -czf $OUT/call7.tgz .
