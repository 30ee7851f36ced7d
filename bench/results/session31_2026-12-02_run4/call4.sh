set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
python3 bench/gpu_rates.py --output-file "$R/gpu_rates.json" > "$R/gpu_rates.txt" 2>&1; tail -1 $R/gpu_rates.txt
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for i in 1 2; do
  ob v2_1k_bal_$i "$V2 --input-len 1024"; ob v2_1k_nobal_$i "$V2 --input-len 1024" DS_LM_HEAD_BALANCE=0
done
ob v3_1k_bal "$V3 --input-len 1024"; ob v3_1k_nobal "$V3 --input-len 1024" DS_LM_HEAD_BALANCE=0
cd /tmp && timeout 90 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' --gtest_also_run_disabled_tests > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "fold=1" $R/timing.log | grep -E "timing|phase" | cut -c1-230
grep -E "op=moe_persistent_tiles next_norm=0 fold=1" $R/timing.log | cut -c1-160
gzip -f $R/timing.log
NCU=/usr/local/cuda/bin/ncu
timeout 100 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
  --kernel-name regex:"Persistent|LmHead" \
  $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len 1024 --output-len 3 \
  > $R/ncu_v2_1k.csv 2> $R/ncu_v2_1k_stderr.txt
echo "ncu rc=$? $(( $(date +%s) - T0 ))s"
python3 bench/ncu_summary.py $R/ncu_v2_1k.csv > $R/ncu_v2_1k_summary.txt 2>&1; head -6 $R/ncu_v2_1k_summary.txt; gzip -f $R/ncu_v2_1k.csv
echo "obs done $(( $(date +%s) - T0 ))s"
LEFT=$(( 560 - ($(date +%s) - T0) ))
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" \
  PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=$LEFT bash scripts/gpu_e2e.sh > $R/gpu_e2e_out.txt 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 ))s"; tail -6 $R/gpu_e2e_out.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
