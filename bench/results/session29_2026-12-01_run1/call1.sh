set -uo pipefail
R=$OUT/c1; . scripts/gpu_call_setup.sh
T0=$(date +%s)
python3 bench/gpu_rates.py --output-file $R/gpu_rates.json > $R/gpu_rates.txt 2>&1; cat $R/gpu_rates.json
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
S1="$V2 --batch-size 1 --input-len 1024"; S4="$V2 --batch-size 1 --input-len 4096"
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for i in 1 2; do ob def_$i "$S1"; done
for i in 1 2; do ob def4k_$i "$S4"; done
ob v3_1k "$V3 --input-len 1024"
ob v3_4k "$V3 --input-len 4096"
echo "obs done $(( $(date +%s) - T0 ))s"
timeout 430 stdbuf -oL $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -60 > $R/tests_failure_excerpt.txt
head -c 2500 $R/tests_failure_excerpt.txt
gzip -f $R/tests.log
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
