set -uo pipefail
T0=$(date +%s)
R=$OUT/c3; . scripts/gpu_call_setup.sh
cd /tmp && timeout 560 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; cd - >/dev/null
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $R/tests.log | head -20
grep -E "op=lm_head_argmax case=.*balance|lm_head_norm graphs" $R/tests.log | cut -c1-200 | head -12
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
