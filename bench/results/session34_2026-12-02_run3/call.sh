set -uo pipefail
T0=$(date +%s)
R=$OUT/c3; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/attn_timing.log 2>&1)
echo "attn timing rc=$? $(( $(date +%s) - T0 ))s"
grep "\[metric\]" $R/attn_timing.log | grep "op=mla_attn_persistent_timing" | cut -c1-200 | head -30
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
NCU=/usr/local/cuda/bin/ncu
for IL in 1024 4096; do
  timeout 150 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"Persistent|MoeRing|LmHead" \
    $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len $IL --output-len 3 \
    > $R/ncu_def_$IL.csv 2> $R/ncu_def_${IL}_stderr.txt
  echo "ncu $IL rc=$? $(( $(date +%s) - T0 ))s"
  python3 bench/ncu_summary.py $R/ncu_def_$IL.csv > $R/ncu_def_${IL}_summary.txt 2>&1
  sed -n 1,16p $R/ncu_def_${IL}_summary.txt | cut -c1-140
done
ob def_1k "$V2 --input-len 1024"
ob def_4k "$V2 --input-len 4096"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
