set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
# 1. the step across the split counts: input 4064 x output 128 crosses S = 128 (ctx <= 4096), 129, 130, 131
OB_OUTPUT_LEN=128 ob cross_a "$V2 --input-len 4064"
grep -A40 "step  context" $R/ob_cross_a.log | awk 'NF==5{printf "%s:%s ", $2, $3}'; echo
OB_OUTPUT_LEN=128 ob cross_b "$V2 --input-len 4064"
grep -A40 "step  context" $R/ob_cross_b.log | awk 'NF==5{printf "%s:%s ", $2, $3}'; echo
OB_OUTPUT_LEN=128 ob cross_1k "$V2 --input-len 992"
grep -A40 "step  context" $R/ob_cross_1k.log | awk 'NF==5{printf "%s:%s ", $2, $3}'; echo
echo "ob done $(( $(date +%s) - T0 ))s"
# 2. the attention kernel alone at 4,096 / 4,100 / 4,130 / 4,200 keys (runner form, generic + stamped)
(cd /tmp && DS_ATTN_TIMING_CTXS=4096,4100,4130,4200 DS_ATTN_TIMING_VARIANTS=12 timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/attn_timing.log 2>&1)
echo "attn timing rc=$? $(( $(date +%s) - T0 ))s"
grep "\[metric\]" $R/attn_timing.log | grep "op=mla_attn_persistent_timing" | cut -c1-200
grep "\[metric\]" $R/attn_timing.log | grep "segment" | awk '{print $2, $0}' | sed 's/.*ctx=\([0-9]*\).*segment="\([^"]*\)".*last block done at \([0-9.]*\) us/\1 \2 \3/' | paste -sd';' | cut -c1-2000
# 3. ncu per kernel: the second step at contexts 4,098 (S = 129) and 4,130 (S = 130)
NCU=/usr/local/cuda/bin/ncu
for IL in 4096 4128; do
  timeout 120 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"Persistent|MoeRing|LmHead" \
    $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --input-len $IL --output-len 3 \
    > $R/ncu_$IL.csv 2> $R/ncu_${IL}_stderr.txt
  echo "ncu $IL rc=$? $(( $(date +%s) - T0 ))s"
  python3 bench/ncu_summary.py $R/ncu_$IL.csv > $R/ncu_${IL}_summary.txt 2>&1
  sed -n 1,7p $R/ncu_${IL}_summary.txt | cut -c1-140
done
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
