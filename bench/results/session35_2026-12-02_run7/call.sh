set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
xz -dc .carry/prev.xz > $B/dsinfer_prev && chmod +x $B/dsinfer_prev
cp $B/dsinfer $B/dsinfer_fin
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 8"
(cd /tmp && timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeUv.*:CudaRunnerFusedUv*:CudaMla*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/tests.log | head -20
grep -E "\[plan\].*h128|h128_b1_4100" $R/tests.log | head -8 | cut -c1-200
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
obx() {  # obx <name> <binary> <args> [ENV=V ...]
  local name=$1 bin=$2 args=$3; shift 3
  env "$@" timeout 60 "$bin" bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args \
    --output-len "${OL:-64}" --output-file "$R/ob_$name.json" > "$R/ob_$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'median step' "$R/ob_$name.log" | head -1 | cut -c1-60)"
}
for r in 1 2; do
  for v in prev fin; do obx v3_${v}_4k_$r $B/dsinfer_$v "$V3 --input-len 4096"; done
  for v in prev fin; do obx v3_${v}_1k_$r $B/dsinfer_$v "$V3 --input-len 1024"; done
done
for v in prev fin; do OL=32 obx v2b8_${v}_4k $B/dsinfer_$v "$V2 --input-len 4096"; done
echo "ob done $(( $(date +%s) - T0 ))s"
mkdir -p $R/rates
for i in 1 2; do python3 bench/gpu_rates.py --output-file $R/rates/before_$i.json > /dev/null 2>&1; done
if [ $TRC = 0 ]; then
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=200 OUT=$R bash scripts/gpu_e2e.sh > $R/e2e_stdout.txt 2>&1
echo "e2e rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/e2e_stdout.txt | head -1 | cut -c1-120
grep -E "^## |^\| 1 \|" $R/summary.md | head -8
fi
for i in 1 2; do python3 bench/gpu_rates.py --output-file $R/rates/after_$i.json > /dev/null 2>&1; done
echo "rates $(( $(date +%s) - T0 ))s: $(python3 -c 'import json,glob; print([round(json.load(open(f))["mem_bw_gbps"]) for f in sorted(glob.glob("'$R'/rates/*.json"))])')"
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
