set -uo pipefail
R=$OUT/c2; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob def_$i "$S1"; ob wo5_$i "$S1" DS_ATTN_WO_STAGE=5; ob wo6_$i "$S1" DS_ATTN_WO_STAGE=6; done
for i in 1 2; do ob def4k_$i "$S4"; ob wo5_4k_$i "$S4" DS_ATTN_WO_STAGE=5; ob wo6_4k_$i "$S4" DS_ATTN_WO_STAGE=6; done
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 150 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.WoStage*:CudaMlaAttnPersistent.RejectsUnsupported:CudaRunnerAttnPersistent.WoStageBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $R/tests.log | head
grep -B3 -A12 "Failure" $R/tests.log | head -40
timeout 200 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "op=mla_attn_persistent_timing" $R/timing.log | grep "stamps=0" | sed 's/.*ctx=/ctx=/' | cut -c1-140
grep -E "op=mla_attn_persistent_phase" $R/timing.log | grep -E "wo_point=(3|5|6) l2_fetch=1 .*stop_p1=0" | grep -E "p3 decode|barrier 3|p4 partials|barrier 4|p5 o_proj" | sed 's/op=mla_attn_persistent_phase //; s/p1_pair=0 stop_p1=0 relaxed=0 //' | cut -c1-160
gzip -f $R/tests.log
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
