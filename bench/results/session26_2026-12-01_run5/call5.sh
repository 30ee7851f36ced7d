set -uo pipefail
R=/tmp/s26c5; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 240 $B/dsinfer_cuda_tests --gtest_filter='CudaLmHeadArgmax.*:CudaRunnerLmHeadArgmax.*' > $R/tests.log 2>&1
echo "tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|FAILED  \]' $R/tests.log | tr '\n' ' ') $(( $(date +%s) - T0 ))s"
grep -E "\[metric\] op=lm_head_argmax|\[fixture\] dummy_v2lite_3layers lm_head" $R/tests.log | cut -c1-260
grep -B2 -A8 "Failure" $R/tests.log | head -40
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do ob def_$i "$S1"; ob lmh_$i "$S1" DS_LM_HEAD_ARGMAX=1; done
ob prof_def "$S1" DS_CUDA_PROFILE=1; grep "phases:" $R/ob_prof_def.log | tail -1
ob prof_lmh "$S1" DS_CUDA_PROFILE=1 DS_LM_HEAD_ARGMAX=1; grep "phases:" $R/ob_prof_lmh.log | tail -1
ob def_4k "$V2 --batch-size 1 --input-len 4096"; ob lmh_4k "$V2 --batch-size 1 --input-len 4096" DS_LM_HEAD_ARGMAX=1
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
ob def_v3 "$V3"; ob lmh_v3 "$V3" DS_LM_HEAD_ARGMAX=1
ob def_b8 "$V2 --batch-size 8 --input-len 1024"; ob lmh_b8 "$V2 --batch-size 8 --input-len 1024" DS_LM_HEAD_ARGMAX=1
gzip -f $R/tests.log
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call5.tgz .
