set -uo pipefail
T0=$(date +%s)
EX=""
for i in 1 2 3; do
  for L in 1024 4096; do EX="$EX;pre_${L}_$i|DS_ROUTER_ROUTE_PRELOAD=1|v3|$L;base_${L}_$i||v3|$L"; done
done
C1_ROUNDS=1 C1_EXTRA="$EX" bash scripts/gpu_c1_check.sh
echo "c1 done $(( $(date +%s) - T0 ))s"
R=$OUT/c2; B=/tmp/dsinfer_e2e/bin; mkdir -p $R
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 4096 --output-len 4"
for pre in 0 1; do
  DS_ROUTER_ROUTE_PRELOAD=$pre timeout 100 $NCU --clock-control none --kernel-name-base function --kernel-name regex:'MoeRouterRouteKernel' --launch-skip 5 --launch-count 5 \
    --section SpeedOfLight --section LaunchStats $B/dsinfer $ARGS > $R/ncu_rr_pre$pre.txt 2>&1
  echo "ncu pre=$pre rc=$? $(grep -E '^    Duration' $R/ncu_rr_pre$pre.txt | awk '{print $3}' | tr '\n' ' ')"
done
cd /tmp && timeout 300 $B/dsinfer_cuda_tests --gtest_filter='CudaMoeRouterRoute.*:CudaRunnerRouterRoute.*:CudaRouterGemv*:CudaRunnerRouterGemv.*' > $R/tests.log 2>&1; echo "tests rc=$? $(grep -E 'PASSED|FAILED' $R/tests.log | head -8)"; grep -c 'PASS$' $R/tests.log; grep -E 'FAIL' $R/tests.log | head -5
cd $OUT && tar czf c2.tgz c2 c1check && rm -rf c2 c1check
echo "total $(( $(date +%s) - T0 ))s"
