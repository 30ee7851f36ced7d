set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
(cd /tmp && DS_TEST_SM90_VARIANTS=0ab timeout 150 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaRunner*Sm90*:CudaMlaDecode.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "tests from .* ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -20
grep -E "combine" $R/tests.log | awk '{print $2,$3,$4,$NF}' | sort -k4 -g | tail -3
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
# Per-CTA clocks of variant 10 at every anchor.
DS_BENCH_SM90_VARIANTS=10 DS_BENCH_MLA_CTA_TIMES=1 DS_BENCH_SM90_BALANCED=10 timeout 120 $B/dsinfer bench kernels --only mla_sm90 --budget-s 100 --out $R/ct > $R/ct.log 2>&1
echo "ct rc=$? $(( $(date +%s) - T0 ))s"; grep "cta-times" $R/ct.log
# The combine by shape (0) vs one (1) vs four (4) groups, twice.
for rep in 1 2; do for a in "b1 32K" "h128 b64 half"; do
DS_BENCH_MLA_ANCHOR="$a" DS_BENCH_SM90_VARIANTS=0,10 DS_BENCH_SM90_COMBINE_GROUPS=0,1,4 DS_BENCH_SM90_BALANCED=10 timeout 60 $B/dsinfer bench kernels --only mla_sm90 --budget-s 50 --out $R/cg_${rep}_${a// /_} > /dev/null 2>&1
echo "cg $rep $a rc=$?"; done; done
V3="--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1"
for r in 1 2; do ob v3_1k_$r "$V3 --input-len 1024"; ob v3_4k_$r "$V3 --input-len 4096"; done
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
