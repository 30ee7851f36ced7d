set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -8
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | grep -E "persistent|stages4_producers2|stages5_producers2" | cut -c1-150
cd - >/dev/null
gzip -f $R/tests.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
R=$OUT/c6b; . scripts/gpu_call_setup.sh
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_1k "$V2 --input-len 1024"
ob ring42_1k "$V2 --input-len 1024" DS_MOE_RING=1
ob ring52_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=5
ob def_1k_b "$V2 --input-len 1024"
cd $OUT && tar czf c6b.tgz c6b && rm -rf c6b
