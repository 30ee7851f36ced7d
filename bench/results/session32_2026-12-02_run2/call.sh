set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
cd /tmp && timeout 240 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.RingBitIdentical' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|Failure|error" $R/tests.log | head -20; grep -E "moe_ring_bits|path ran" $R/tests.log | head -12 | cut -c1-200
timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | cut -c1-150
cd - >/dev/null
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_1k "$V2 --input-len 1024"
ob ring42_1k "$V2 --input-len 1024" DS_MOE_RING=1
ob ring52_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=5
ob ring41_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_PRODUCERS=1
ob def_1k_b "$V2 --input-len 1024"
ob ring42_1k_b "$V2 --input-len 1024" DS_MOE_RING=1
ob def_4k "$V2 --input-len 4096"
ob ring42_4k "$V2 --input-len 4096" DS_MOE_RING=1
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
