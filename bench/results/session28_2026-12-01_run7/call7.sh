set -uo pipefail
R=$OUT/c7; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3 4; do ob def_$i "$S1"; ob spec_$i "$S1" DS_ATTN_SPECIALIZE=1; done
for i in 1 2; do ob def4k_$i "$S4"; ob spec4k_$i "$S4" DS_ATTN_SPECIALIZE=1; done
ob def_b8 "$V2 --batch-size 8 --input-len 1024"; ob spec_b8 "$V2 --batch-size 8 --input-len 1024" DS_ATTN_SPECIALIZE=1
ob v3_def "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"; ob v3_spec "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024" DS_ATTN_SPECIALIZE=1
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.SpecializeBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -E "specialized instantiation 1|attn_specialize" $R/tests.log | head -8
grep -B3 -A12 "Failure" $R/tests.log | head -30
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_timing" $R/timing.log | grep "stamps=0" | sed 's/.*ctx=/ctx=/' | cut -c1-150
NCU=/usr/local/cuda/bin/ncu
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 16"
k=MlaAttnPersistentKernel
DS_ATTN_SPECIALIZE=1 timeout 100 $NCU --clock-control none --cache-control none --kernel-name-base function --kernel-name "regex:$k" --launch-skip 300 --launch-count 1 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --import-source yes -o /tmp/ncu_spec $B/dsinfer $ARGS > $R/ncu_spec.log 2>&1
$NCU --import /tmp/ncu_spec.ncu-rep --page source --csv --print-source sass > $R/src_spec.csv 2>&1
python3 bench/ncu_source_top.py $R/src_spec.csv 40 > $R/top_spec.txt 2>&1
echo "spec: $(grep -E 'stall_no_inst|stall_barrier|stall_long_sb' $R/top_spec.txt | tail -3 | tr -s ' ' | tr '\n' ' ')"
gzip -f $R/src_spec.csv $R/tests.log
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
