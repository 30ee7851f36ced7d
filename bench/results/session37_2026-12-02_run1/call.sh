set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=0ab timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "combine4|balanced_x1_combine4" $R/tests.log | awk '{print $2,$3,$4,$NF}' | sort -k4 -g | tail -3
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
# A/B 1: the L2 cache hint on the cache loads, variants 0, 10, 11, interleaved per anchor.
DS_BENCH_SM90_VARIANTS=0,10,11 DS_BENCH_SM90_L2HINTS=0,1,2 DS_BENCH_SM90_BALANCED=none timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 180 --out $R/l2 > $R/l2.log 2>&1
echo "l2 rc=$? $(( $(date +%s) - T0 ))s"
# A/B 2: combine groups x PDL (variant 10 and its balanced list).
DS_BENCH_SM90_VARIANTS=10 DS_BENCH_SM90_COMBINE_GROUPS=0,4 DS_BENCH_MLA_PDL=0,1 DS_BENCH_SM90_BALANCED=10 timeout 150 $B/dsinfer bench kernels --only mla_sm90 --budget-s 130 --out $R/cg > $R/cg.log 2>&1
echo "cg rc=$? $(( $(date +%s) - T0 ))s"
# ncu: L2 hit rate, DRAM bytes, clock at h128 b128 4K, variant 11 and 10, hint 0 vs 1.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum
for v in 11 10; do
  K=$([ $v = 10 ] && echo MlaDecodeSm90Wg3Kernel || echo MlaDecodeSm90PairKernel)
  for h in 0 1; do
    DS_BENCH_MLA_ANCHOR="h128 b128 4K" DS_BENCH_SM90_VARIANTS=$v DS_BENCH_SM90_L2HINTS=$h DS_BENCH_SM90_BALANCED=none timeout 90 $NCU --clock-control none --cache-control none --kernel-name "regex:$K" --launch-skip 10 --launch-count 2 --metrics $M --csv --print-units base $B/dsinfer bench kernels --only mla_sm90 --budget-s 20 --out /tmp/nk > $R/ncu_v${v}_h$h.csv 2>&1
    echo "ncu v$v h$h rc=$? $(( $(date +%s) - T0 ))s"
  done
done
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
