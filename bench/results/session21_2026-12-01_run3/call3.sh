set -uo pipefail
R=/tmp/c3; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 220 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
B4="$V2 --batch-size 1 --input-len 4096 --output-len 64"
OFF="DS_MOE_L2_FETCH=0 DS_ATTN_L2_FETCH=0"
for i in 1 2 3; do
run new$i "" "$B1"
run off$i "$OFF" "$B1"
run moe1_$i "DS_ATTN_L2_FETCH=0" "$B1"
run attn1_$i "DS_MOE_L2_FETCH=0" "$B1"
done
run new_4k "" "$B4"; run off_4k "$OFF" "$B4"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call3.tgz .
