set -uo pipefail
R=$OUT/c11; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.RegTiles*:CudaMlaAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -B2 -A10 "Failure" $R/tests.log | head -30
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
S4="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob reg_$i "$S1" DS_ATTN_REG_TILES=1; ob def_$i "$S1"; done
ob reg_4k "$S4" DS_ATTN_REG_TILES=1; ob def_4k "$S4"; ob reg_4k2 "$S4" DS_ATTN_REG_TILES=1; ob def_4k2 "$S4"
gzip -f $R/tests.log
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
echo "total $(( $(date +%s) - T0 ))s"
