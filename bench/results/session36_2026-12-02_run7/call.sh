set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 120 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaFp8Gemv*:CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head; grep -E "op=fp8_gemv_pdl" $R/tests.log | awk '{print $3, $4, $NF}'
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for v in 10; do
  K=$([ $v = 10 ] && echo MlaDecodeSm90Wg3Kernel || echo MlaDecodeSm90Kernel)
  SKIP=$([ $v = 10 ] && echo 4 || echo 330)
  DS_BENCH_MLA_ANCHOR="b1 32K" DS_BENCH_SM90_VARIANTS=$v DS_BENCH_SM90_BALANCED=none timeout 60 $NCU --clock-control none --cache-control none --kernel-name "regex:$K|MlaDecodeSm90Combine" --launch-skip $SKIP --launch-count 12 --metrics gpu__time_duration.sum --csv --print-units base $B/dsinfer bench kernels --only mla_sm90 --budget-s 30 --out /tmp/nk > $R/ncu_b1_32k_v$v.csv 2>&1
  echo "ncu v$v rc=$?"; python3 bench/ncu_summary.py $R/ncu_b1_32k_v$v.csv 2>&1 | sed -n 1,16p
done
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for r in 1; do ob v3_1k_$r "$V3 --input-len 1024"; ob v3_4k_$r "$V3 --input-len 4096"; done
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
