set -uo pipefail
R=$OUT/c5; . scripts/gpu_call_setup.sh
T0=$(date +%s)
NCU=/usr/local/cuda/bin/ncu
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 16"
for k in MlaAttnPersistentKernel MoePersistentKernel; do
  timeout 150 $NCU --clock-control none --cache-control none --kernel-name-base function --kernel-name "regex:$k" --launch-skip 300 --launch-count 1 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/ncu_$k $B/dsinfer $ARGS > $R/ncu_$k.log 2>&1
  echo "$k rc=$? $(( $(date +%s) - T0 ))s"
  $NCU --import /tmp/ncu_$k.ncu-rep --page source --csv --print-source sass > $R/src_$k.csv 2>&1
  python3 bench/ncu_source_top.py $R/src_$k.csv 40 > $R/top_$k.txt 2>&1
  $NCU --import /tmp/ncu_$k.ncu-rep --page details > $R/details_$k.txt 2>&1
  tail -17 $R/top_$k.txt
  gzip -f $R/src_$k.csv
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
