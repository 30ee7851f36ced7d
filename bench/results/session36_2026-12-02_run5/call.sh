set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunner*Sm90*:CudaMlaDecode.*:CudaFp8Gemv.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
for r in 1 2; do
  DS_BENCH_SM90_BALANCED_FIRST=1 DS_BENCH_SM90_VARIANTS=0,10 DS_BENCH_SM90_BALANCED=0,10 timeout 200 stdbuf -oL $B/dsinfer bench kernels --only mla_sm90 --commit "$(cat $B/COMMIT)" --budget-s 150 --out $R/k$r > $R/bench$r.log 2>&1
  echo "bench (balanced first) $r rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^ceilings" $R/bench$r.log
  grep -E "^mla_decode_sm90" $R/bench$r.log | grep -E "half32K|b128 8K|b64 4K" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $4} {for(i=5;i<=NF;i++) if ($i=="us") {print $(i-1); break}}'
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
