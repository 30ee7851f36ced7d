set -uo pipefail
R=$OUT/c2; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
ob def_prof "$S1" DS_CUDA_PROFILE=1; ob fd_prof "$S1" DS_CUDA_PROFILE=1 DS_MOE_FUSED_DOWN=1
grep -h "phases:" $R/ob_def_prof.log $R/ob_fd_prof.log | cut -c1-1500
ob fd_cvd "$S1" DS_MOE_FUSED_DOWN=1 DS_PERSISTENT_CARVEOUT=-1; ob def_cvd "$S1" DS_PERSISTENT_CARVEOUT=-1
ob fd_tl "$S1" DS_MOE_FUSED_DOWN=1 DS_STEP_TIMELINE=1
timeout 150 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=moe_persistent_timing|op=moe_persistent_phase" $R/timing.log | grep -v "start skew" | grep -E "timing|phase2|barrier2|phase3" | sed 's/case=V2Lite //; s/gu_ksplit=8 shared_first=1 l2_fetch=1 //' | cut -c1-200
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
