set -uo pipefail
R=/tmp/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.L2PrefetchBitIdentical:CudaRunnerAttnPersistent.SplitCounterBitIdentical:CudaMlaAttnPersistent.*:CudaMoePersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run def "" "$B1"
run a1g "DS_L2_PF_ATTN=1 DS_L2_PF_ATTN_WHAT=1" "$B1"
run m1 "DS_L2_PF_MOE=1 DS_L2_PF_MOE_WHAT=1" "$B1"
run m2 "DS_L2_PF_MOE=2 DS_L2_PF_MOE_WHAT=1" "$B1"
run def2 "" "$B1"
run a1gd "DS_L2_PF_ATTN=1 DS_L2_PF_ATTN_WHAT=3" "$B1"
run a3g "DS_L2_PF_ATTN=3 DS_L2_PF_ATTN_WHAT=1" "$B1"
run a2w "DS_L2_PF_ATTN=2 DS_L2_PF_ATTN_WHAT=4" "$B1"
run m1all "DS_L2_PF_MOE=1 DS_L2_PF_MOE_WHAT=3" "$B1"
run def3 "" "$B1"
run a1g_el "DS_L2_PF_ATTN=1 DS_L2_PF_ATTN_WHAT=1 DS_L2_PF_EVICT_LAST=1" "$B1"
run m1_el "DS_L2_PF_MOE=1 DS_L2_PF_MOE_WHAT=1 DS_L2_PF_EVICT_LAST=1" "$B1"
run m3 "DS_L2_PF_MOE=3 DS_L2_PF_MOE_WHAT=1" "$B1"
run a1g_m1 "DS_L2_PF_ATTN=1 DS_L2_PF_ATTN_WHAT=1 DS_L2_PF_MOE=1 DS_L2_PF_MOE_WHAT=1" "$B1"
run a1g_m2 "DS_L2_PF_ATTN=1 DS_L2_PF_ATTN_WHAT=1 DS_L2_PF_MOE=2 DS_L2_PF_MOE_WHAT=1" "$B1"
run def4 "" "$B1"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call1.tgz .
