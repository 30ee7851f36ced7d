set -uo pipefail
R=$OUT/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob def_$i "$S1"; ob moe3_$i "$S1" DS_MOE_L2_FETCH=3; ob both3_$i "$S1" DS_MOE_L2_FETCH=3 DS_ATTN_L2_FETCH=3; ob attn3_$i "$S1" DS_ATTN_L2_FETCH=3; done
for i in 1 2; do ob def4k_$i "$S4"; ob moe3_4k_$i "$S4" DS_MOE_L2_FETCH=3; ob both3_4k_$i "$S4" DS_MOE_L2_FETCH=3 DS_ATTN_L2_FETCH=3; done
ob def_b8 "$V2 --batch-size 8 --input-len 1024"; ob moe3_b8 "$V2 --batch-size 8 --input-len 1024" DS_MOE_L2_FETCH=3
ob v3_def "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"; ob v3_moe3 "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024" DS_MOE_L2_FETCH=3
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.L2FetchBitIdentical:CudaMlaAttnPersistent.RejectsUnsupported:CudaMoePersistent.*Reject*:CudaMoePersistent.*Unsupported*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -B3 -A12 "Failure" $R/tests.log | head -30
NCU=/usr/local/cuda/bin/ncu
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 16"
for v in 1 3; do
  k=MlaAttnPersistentKernel
  DS_MOE_L2_FETCH=$v timeout 100 $NCU --clock-control none --cache-control none --kernel-name-base function --kernel-name "regex:$k" --launch-skip 300 --launch-count 1 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/ncu_${k}_$v $B/dsinfer $ARGS > $R/ncu_${k}_$v.log 2>&1
  $NCU --import /tmp/ncu_${k}_$v.ncu-rep --page source --csv --print-source sass > $R/src_${k}_moe$v.csv 2>&1
  python3 bench/ncu_source_top.py $R/src_${k}_moe$v.csv 40 > $R/top_${k}_moe$v.txt 2>&1
  echo "moe_l2_fetch=$v: $(grep -E 'stall_no_inst|stall_barrier|stall_long_sb' $R/top_${k}_moe$v.txt | tr -s ' ' | tr '\n' ' ')"
  gzip -f $R/src_${k}_moe$v.csv
done
gzip -f $R/tests.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
