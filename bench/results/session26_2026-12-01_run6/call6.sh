set -uo pipefail
R=$OUT/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do ob new_$i "$S1"; ob nolmh_$i "$S1" DS_LM_HEAD_ARGMAX=0; done
ob new_v3 "$V2 --batch-size 1 --input-len 4096"; ob nolmh_4k "$V2 --batch-size 1 --input-len 4096" DS_LM_HEAD_ARGMAX=0
mv $R/ob_new_v3.json $R/ob_new_4k.json; mv $R/ob_new_v3.log $R/ob_new_4k.log
echo "one-batch done $(( $(date +%s) - T0 ))s"
timeout 400 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -E "\[fixture\] dummy_v2lite_3layers lm_head|op=lm_head_argmax case=v3" $R/tests.log | cut -c1-220
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
head -c 3000 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
echo "total $(( $(date +%s) - T0 ))s"
