set -uo pipefail
R=$OUT/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do ob def_$i "$S1"; ob ac86_$i "$S1" DS_PERSISTENT_CARVEOUT=86 DS_MOE_CARVEOUT=58; done
ob acdrv_1 "$S1" DS_PERSISTENT_CARVEOUT=-1 DS_MOE_CARVEOUT=58
ob def_4k "$V2 --batch-size 1 --input-len 4096"
ob v3_8l "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024"
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 440 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -80 > $R/tests_failure_excerpt.txt
head -c 3000 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
