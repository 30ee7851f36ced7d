set -uo pipefail
T0=$(date +%s)
C1_EXTRA="v3split_1024|DS_COMBINE_NORM_SPLIT=8|v3|1024;v3split_4096|DS_COMBINE_NORM_SPLIT=8|v3|4096;v3pre_1024|DS_MLA_UV_PRELOAD=1|v3|1024;v3pre_4096|DS_MLA_UV_PRELOAD=1|v3|4096;v3both_1024|DS_COMBINE_NORM_SPLIT=8 DS_MLA_UV_PRELOAD=1|v3|1024;v3both_4096|DS_COMBINE_NORM_SPLIT=8 DS_MLA_UV_PRELOAD=1|v3|4096;v2onel_4096|DS_ATTN_MERGE_COLS=0|v2|4096" \
  bash scripts/gpu_c1_check.sh 2>&1 | tail -30
echo "c1 done $(( $(date +%s) - T0 ))s"
R=$OUT/c4; . scripts/gpu_call_setup.sh
timeout 440 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
head -c 3000 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c4.tgz c4 c1check && rm -rf c4 c1check
echo "total $(( $(date +%s) - T0 ))s"
