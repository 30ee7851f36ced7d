set -uo pipefail
R=/tmp/s25c12; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -40
timeout 100 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_timing.*stamps=0|ctx=1024 wo_point=3 l2_fetch=1 p1_pair=(0|4) stop_p1=0 .*(p1 q|barrier 1|p2 n|p3 d|p5)|op=mla_attn_persistent_p1 ctx=1024 wo_point=3 l2_fetch=1 p1_pair=(0|4) stop_p1=0" $R/timing.log | sed 's/\[metric\] op=mla_attn_persistent_//; s/in_norm=1 overlap=1 split=1 //; s/graph of 8, 8 weight sets; 27.5 MB of weights a launch: //'
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do
  ob off_$i "$S1"
  ob p4_$i "$S1" DS_ATTN_P1_PAIR=4
  ob c72_$i "$S1" DS_PERSISTENT_CARVEOUT=72
  
done
ob p4_4k "$V2 --batch-size 1 --input-len 4096" DS_ATTN_P1_PAIR=4; ob off_4k "$V2 --batch-size 1 --input-len 4096"; ob c72_4k "$V2 --batch-size 1 --input-len 4096" DS_PERSISTENT_CARVEOUT=72
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call12.tgz .
