set -uo pipefail
R=/tmp/c8; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 400 $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
V3="--model $B/data/deepseek-v3 --num-layers 8"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 540 ] && { echo "skip $name"; return; }
  eval "timeout 40 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run v2_1 "" "$B1"; run wo2_1 "DS_ATTN_WO_STAGE=2" "$B1"; run v2_2 "" "$B1"; run wo2_2 "DS_ATTN_WO_STAGE=2" "$B1"; run v2_3 "" "$B1"
run v2_4k "" "$V2 --batch-size 1 --input-len 4096 --output-len 64"; run wo2_4k "DS_ATTN_WO_STAGE=2" "$V2 --batch-size 1 --input-len 4096 --output-len 64"
run v3_1 "" "$V3 --batch-size 1 --input-len 1024 --output-len 64"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call8.tgz .
