set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 280 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*:CudaRunnerLmHeadArgmax.*:CudaMoePersistent.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure|tests ran" $R/tests.log | head -12
(cd /tmp && timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoeRing.DISABLED_V2LiteTimingReport' > $R/timing.log 2>&1)
echo "timing rc=$? $(( $(date +%s) - T0 ))s"; grep "\[metric\]" $R/timing.log | grep -E "timing" | sed -E 's/\(on 138.*//; s/op=moe_ring_//' | cut -c1-130
grep "\[metric\]" $R/timing.log | grep phase | grep -E "routed|logits in|gate_up consumed|barrier passed|act in|\"end" | sed -E 's/op=moe_ring_//; s/_producers2//' | cut -c1-130
gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_1k "$V2 --input-len 1024"
ob s6_1k "$V2 --input-len 1024" DS_MOE_RING_STAGES=6
ob def_4k "$V2 --input-len 4096"
ob s6_4k "$V2 --input-len 4096" DS_MOE_RING_STAGES=6
ob def_1k_b "$V2 --input-len 1024"
ob s6_1k_b "$V2 --input-len 1024" DS_MOE_RING_STAGES=6
ob def_4k_b "$V2 --input-len 4096"
ob s6_4k_b "$V2 --input-len 4096" DS_MOE_RING_STAGES=6
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
