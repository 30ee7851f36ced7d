set -uo pipefail
R=/tmp/s25c16; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport:CudaStreamPattern.DISABLED_StartReport:CudaStreamPattern.DISABLED_SmemReport' > $R/reports.log 2>&1
echo "reports rc=$? $(( $(date +%s) - T0 ))s"
grep -E "PASSED|FAILED" $R/reports.log | head -5
grep -E "ctx=1024 wo_point=3 l2_fetch=1 stop_p1=0 .*(p1 q/kv_a)|op=mla_attn_persistent_p1 ctx=1024 wo_point=3 l2_fetch=1 stop_p1=0|stream_start mode=register_burst1_smem0KB bytes=(14.9|92.3)MB gap_before=0|stream_smem bps=(1|2) pad=(0|100|140|43)KB carveout=-1 bytes=92" $R/reports.log | sed 's/\[metric\] op=//'
tar -C $R -czf $OUT/call16.tgz .
