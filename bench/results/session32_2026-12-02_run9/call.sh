set -uo pipefail
T0=$(date +%s)
R=$OUT/c9; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -8
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1)
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | grep -E "timing" | sed -E 's/\(on 138.*//; s/op=moe_ring_//' | cut -c1-130
grep "\[metric\]" $R/timing.log | grep phase | grep -E "early0_warm1" | grep -E "routed|logits in|first routed|gate_up consumed|barrier passed|\"end" | sed -E 's/op=moe_ring_//; s/_producers2//' | cut -c1-130
gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_1k "$V2 --input-len 1024"
ob ring42_1k "$V2 --input-len 1024" DS_MOE_RING=1
ob ring52_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=5
ob def_1k_b "$V2 --input-len 1024"
ob ring42_1k_b "$V2 --input-len 1024" DS_MOE_RING=1
ob def_4k "$V2 --input-len 4096"
ob ring42_4k "$V2 --input-len 4096" DS_MOE_RING=1
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
echo "total $(( $(date +%s) - T0 ))s"
