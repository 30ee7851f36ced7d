set -uo pipefail
T0=$(date +%s)
# 1. the concurrency-1 table with A/B runs (gpu_c1_check.sh writes $OUT/c1check)
C1_ROUNDS=2 C1_EXTRA="v3cv72_1k|DS_FP8_GEMV_CARVEOUT=72|v3|1024;v3cv72_4k|DS_FP8_GEMV_CARVEOUT=72|v3|4096;v3cv58_1k|DS_FP8_GEMV_CARVEOUT=58|v3|1024;v3cv58_4k|DS_FP8_GEMV_CARVEOUT=58|v3|4096;v3cv72mw8_1k|DS_FP8_GEMV_CARVEOUT=72 DS_FP8_GEMV_MIN_MWEIGHTS=8|v3|1024;v3cv72mw8_4k|DS_FP8_GEMV_CARVEOUT=72 DS_FP8_GEMV_MIN_MWEIGHTS=8|v3|4096;v3cv72ex1_1k|DS_FP8_GEMV_CARVEOUT=72 DS_FP8_GEMV_EXPERTS_MIN_TOKENS=1|v3|1024;v3cv72all_1k|DS_FP8_GEMV_CARVEOUT=72 DS_FP8_GEMV_MIN_MWEIGHTS=8 DS_FP8_GEMV_EXPERTS_MIN_TOKENS=1|v3|1024;v3base_1k_r3||v3|1024;v3base_4k_r3||v3|4096" \
  bash scripts/gpu_c1_check.sh
echo "c1 done $(( $(date +%s) - T0 ))s"
R=$OUT/c1; B=/tmp/dsinfer_e2e/bin; mkdir -p $R
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ARGS="bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 --model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 4096 --output-len 4"
# 2. launch config + speed of the FP8 GEMV with and without the carveout hint, the skinny kernels
for cv in -1 72; do
  DS_FP8_GEMV_CARVEOUT=$cv timeout 120 $NCU --clock-control none --kernel-name-base function --kernel-name regex:'Fp8GemvTmaKernel|SkinnyGemmSiluKernel|MlaDecodeSm90Kernel|MoeRouterRouteKernel' --launch-skip 12 --launch-count 8 \
    --section LaunchStats --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats $B/dsinfer $ARGS > $R/ncu_cfg_cv$cv.txt 2>&1
  echo "ncu cv=$cv rc=$? $(( $(date +%s) - T0 ))s"
  grep -E '^  [A-Za-z].*\(|Shared Memory Configuration Size|Duration|Dynamic Shared|Memory Throughput|DRAM Throughput' $R/ncu_cfg_cv$cv.txt | head -80
done
# 3. where the router + routing launch waits (one launch, stall sampling by SASS line)
k=MoeRouterRouteKernel
timeout 120 $NCU --clock-control none --kernel-name-base function --kernel-name regex:$k --launch-skip 3 --launch-count 1 \
  --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section LaunchStats --import-source yes -o /tmp/ncu_$k $B/dsinfer $ARGS > $R/ncu_$k.log 2>&1
echo "$k rc=$? $(( $(date +%s) - T0 ))s"
$NCU --import /tmp/ncu_$k.ncu-rep --page source --csv --print-source sass > $R/src_$k.csv 2>&1
python3 bench/ncu_source_top.py $R/src_$k.csv 40 > $R/top_$k.txt 2>&1
$NCU --import /tmp/ncu_$k.ncu-rep --page details > $R/details_$k.txt 2>&1
head -c 3000 $R/top_$k.txt; tail -20 $R/top_$k.txt; gzip -f $R/src_$k.csv
cd /tmp && timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaFp8Gemv.*:CudaRunnerFp8Gemv.DummyV3Carveout*' > $R/tests.log 2>&1; echo "tests rc=$? $(grep -E 'PASSED|FAILED' $R/tests.log | head -5)"; grep fixture $R/tests.log | head
cd $OUT && tar czf c1.tgz c1 c1check && rm -rf c1 c1check
echo "total $(( $(date +%s) - T0 ))s"
