set -uo pipefail
R=$OUT/c16; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*:CudaMoePersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -E "\[fixture\].*moe_carveout" $R/tests.log
grep -B2 -A10 "Failure" $R/tests.log | head -30
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
for i in 1 2 3; do ob new_$i "$S1"; ob old_$i "$S1" DS_MOE_CARVEOUT=-2; done
ob new_4k "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096"; ob old_4k "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096" DS_MOE_CARVEOUT=-2
ob new_b8 "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 8 --input-len 1024"; ob old_b8 "--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 8 --input-len 1024" DS_MOE_CARVEOUT=-2
ob v3_8l "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
gzip -f $R/tests.log
cd $OUT && tar czf c16.tgz c16 && rm -rf c16
echo "total $(( $(date +%s) - T0 ))s"
