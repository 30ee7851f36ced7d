set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaLmHeadArgmax.*:CudaRunnerLmHeadArgmax.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -10; grep -E "\[metric\].*norm|\[fixture\]" $R/tests.log | cut -c1-260
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
python3 bench/gpu_rates.py --output-file "$R/gpu_rates.json" > "$R/gpu_rates.txt" 2>&1; tail -1 $R/gpu_rates.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for i in 1 2; do
  ob v2_1k_on_$i "$V2 --input-len 1024"; ob v2_1k_off_$i "$V2 --input-len 1024" DS_LM_HEAD_NORM=0
  ob v2_4k_on_$i "$V2 --input-len 4096"; ob v2_4k_off_$i "$V2 --input-len 4096" DS_LM_HEAD_NORM=0
done
ob v3_1k "$V3 --input-len 1024"
NCU=/usr/local/cuda/bin/ncu
timeout 120 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
  --kernel-name regex:"Persistent|LmHead" \
  $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len 1024 --output-len 3 \
  > $R/ncu_v2_1k.csv 2> $R/ncu_v2_1k_stderr.txt
echo "ncu rc=$? $(( $(date +%s) - T0 ))s"
python3 bench/ncu_summary.py $R/ncu_v2_1k.csv > $R/ncu_v2_1k_summary.txt 2>&1; head -8 $R/ncu_v2_1k_summary.txt; tail -4 $R/ncu_v2_1k_summary.txt; gzip -f $R/ncu_v2_1k.csv
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
