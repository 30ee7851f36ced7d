set -uo pipefail
R=$OUT/c8; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob def_$i "$S1"; ob spec1_$i "$S1" DS_ATTN_SPECIALIZE=1; ob spec2_$i "$S1" DS_ATTN_SPECIALIZE=2; done
for i in 1 2; do ob def4k_$i "$S4"; ob spec1_4k_$i "$S4" DS_ATTN_SPECIALIZE=1; ob spec2_4k_$i "$S4" DS_ATTN_SPECIALIZE=2; done
ob def_b8 "$V2 --batch-size 8 --input-len 1024"; ob spec2_b8 "$V2 --batch-size 8 --input-len 1024" DS_ATTN_SPECIALIZE=2
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -E "attn_specialize" $R/tests.log | head -8
grep -B3 -A12 "Failure" $R/tests.log | head -30
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_timing" $R/timing.log | grep "stamps=0" | grep "wo_point=3 .*l2_fetch=1 stop_p1=0" | sed 's/.*ctx=/ctx=/' | cut -c1-140
NCU=/usr/local/cuda/bin/ncu
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 16"
DS_ATTN_SPECIALIZE=2 timeout 100 $NCU --clock-control none --cache-control none --kernel-name-base function --kernel-name "regex:MlaAttnPersistentKernel" --launch-skip 300 --launch-count 1 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/ncu_spec2 $B/dsinfer $ARGS > $R/ncu_spec2.log 2>&1
$NCU --import /tmp/ncu_spec2.ncu-rep --page source --csv --print-source sass > $R/src_spec2.csv 2>&1
python3 bench/ncu_source_top.py $R/src_spec2.csv 40 > $R/top_spec2.txt 2>&1
echo "spec2: $(grep -E 'stall_no_inst|stall_barrier|stall_long_sb' $R/top_spec2.txt | tail -3 | tr -s ' ' | tr '\n' ' ')"
gzip -f $R/src_spec2.csv $R/tests.log
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
echo "total $(( $(date +%s) - T0 ))s"
