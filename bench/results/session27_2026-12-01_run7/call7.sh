set -uo pipefail
R=$OUT/c7; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
ob fd "$S1" DS_MOE_FUSED_DOWN=1; ob fdr "$S1" DS_MOE_FUSED_DOWN=1 DS_MOE_FD_REGS=1; ob def "$S1"
ob fd_b1 "$S1" DS_MOE_FUSED_DOWN=1 DS_PERSISTENT_MOE_BPS=1; ob fdr_b1 "$S1" DS_MOE_FUSED_DOWN=1 DS_MOE_FD_REGS=1 DS_PERSISTENT_MOE_BPS=1; ob def_b1 "$S1" DS_PERSISTENT_MOE_BPS=1
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing" $R/timing.log | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-250
timeout 100 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.FusedDown*' > $R/fd_tests.log 2>&1; echo "fd tests rc=$?"
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
