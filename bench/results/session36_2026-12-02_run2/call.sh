set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt
grep -E "balanced.*rel_l2" $R/tests.log | awk '{print $3, $5, $NF}' | sort -t= -k3 -g | tail -4
grep -c "balanced.*PASS" $R/tests.log; grep -c "FAIL" $R/tests.log; gzip -f $R/tests.log
DS_BENCH_SM90_VARIANTS=0,10 DS_BENCH_SM90_BALANCED=0,10 timeout 300 stdbuf -oL $B/dsinfer bench kernels --only mla_sm90 --commit "$(cat $B/COMMIT)" --budget-s 260 --out $R/k > $R/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^ceilings|^mla_decode_sm90" $R/bench.log | cut -c1-175
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
