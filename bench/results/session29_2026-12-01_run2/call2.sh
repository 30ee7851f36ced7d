set -uo pipefail
R=$OUT/c2; . scripts/gpu_call_setup.sh
T0=$(date +%s)
NCU=/usr/local/cuda/bin/ncu
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for L in 1024 4096; do
  timeout 150 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $B/dsinfer bench one-batch --load-format dummy --device cuda $V3 --input-len $L --output-len 3 --mem-bw-gbps 3931 --flops-tflops 700 \
    > $R/ncu_v3_$L.csv 2> $R/ncu_v3_${L}_stderr.txt
  echo "ncu $L rc=$? $(( $(date +%s) - T0 ))s"
  python3 bench/ncu_summary.py $R/ncu_v3_$L.csv > $R/ncu_v3_${L}_summary.txt 2>&1
  head -45 $R/ncu_v3_${L}_summary.txt
done
for L in 1024 4096; do
  timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda $V3 --input-len $L --output-len 16 --mem-bw-gbps 3931 --flops-tflops 700 --profile > $R/prof_v3_$L.log 2>&1
  echo "prof $L rc=$?"; grep -v "^\[" $R/prof_v3_$L.log | tail -30
done
ob v3_1k "$V3 --input-len 1024"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
