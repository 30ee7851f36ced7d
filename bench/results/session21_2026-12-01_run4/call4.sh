set -uo pipefail
R=/tmp/c4; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.P1PreloadBitIdentical:CudaMlaAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
timeout 100 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$?"
grep -E "mla_attn_persistent_timing" $R/timing.log | grep "stamps=0" | sed 's/.*ctx=/ctx=/' | cut -c1-120
grep -E "segment=\"p1 q/kv_a\"" $R/timing.log | grep "ctx=1024" | sed 's/.*ctx=/ctx=/'
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
B4="$V2 --batch-size 1 --input-len 4096 --output-len 64"
for i in 1 2 3; do
run def$i "" "$B1"
run pre1_$i "DS_ATTN_P1_PRELOAD=1" "$B1"
run pre2_$i "DS_ATTN_P1_PRELOAD=2" "$B1"
done
run def_4k "" "$B4"; run pre2_4k "DS_ATTN_P1_PRELOAD=2" "$B4"; run pre1_4k "DS_ATTN_P1_PRELOAD=1" "$B4"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call4.tgz .
