set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.MoeSpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10; grep -E "moe_router_tagged" $R/tests.log | cut -c1-200
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
python3 bench/gpu_rates.py --output-file "$R/gpu_rates.json" > "$R/gpu_rates.txt" 2>&1; tail -1 $R/gpu_rates.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for i in 1 2 3; do
  ob v2_1k_tag_$i "$V2 --input-len 1024" DS_MOE_ROUTER_TAGGED=1; ob v2_1k_def_$i "$V2 --input-len 1024"
done
for i in 1 2; do
  ob v2_4k_tag_$i "$V2 --input-len 4096" DS_MOE_ROUTER_TAGGED=1; ob v2_4k_def_$i "$V2 --input-len 4096"
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
