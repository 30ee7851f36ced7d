set -uo pipefail
T0=$(date +%s)
R=$OUT/c12; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRing.*:CudaRunnerPersistentMoe.RingBitIdentical' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure" $R/tests.log | head -8; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
ob def_4k "$V2 --input-len 4096"
ob ring42_4k "$V2 --input-len 4096" DS_MOE_RING=1
ob ring42ne_4k "$V2 --input-len 4096" DS_MOE_RING=1 DS_MOE_RING_EVICT_FIRST=0
ob def_1k "$V2 --input-len 1024"
ob ring42_1k "$V2 --input-len 1024" DS_MOE_RING=1
ob ring52_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_STAGES=5
ob ring42ne_1k "$V2 --input-len 1024" DS_MOE_RING=1 DS_MOE_RING_EVICT_FIRST=0
ob def_1k_b "$V2 --input-len 1024"
cd $OUT && tar czf c12.tgz c12 && rm -rf c12
echo "total $(( $(date +%s) - T0 ))s"
