set -uo pipefail
R=/tmp/c13; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
OFF="DS_ATTN_ABSORB_OVERLAP=0 DS_PERSISTENT_MOE_SHARED_FIRST=0 DS_ATTN_SPLIT_COUNTER=0 DS_PERSISTENT_MOE_TAIL_FOLD=0"
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ')"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run new "" "$B1"; run off "$OFF" "$B1"; run new2 "" "$B1"; run off2 "$OFF" "$B1"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call13.tgz .
