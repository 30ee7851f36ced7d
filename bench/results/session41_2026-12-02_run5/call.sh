set -uo pipefail
T0=$(date +%s)
R=$OUT/c5; . scripts/gpu_call_setup.sh
# Op tests at 15 / 16 (bits vs 10; 16 with PDL; the balanced work list's new plans within 3e-3 of the uniform plan).
(cd /tmp && DS_TEST_SM90_VARIANTS=fg timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "variant 1[56] vs 10:" $R/tests.log | awk '{print $3, $6, $7}' | sort | uniq -c | head
grep -iE "balanced|work.list" $R/tests.log | grep -iE "max|rel" | head -8 | cut -c1-200
gzip -f $R/tests.log
# The mixed anchors with the new work-list plans, both timings, two passes.
for pass in 1 2; do
DS_BENCH_SM90_VARIANTS=15,16 DS_BENCH_SM90_BALANCED=15,16 DS_BENCH_SM90_QBF16=15,16 DS_BENCH_MLA_ANCHOR_METHOD=1 DS_BENCH_MLA_ANCHOR=half32K \
  timeout 200 $B/dsinfer bench kernels --only mla_sm90 --budget-s 150 --out $R/b$pass > $R/b$pass.log 2>&1
echo "bench pass $pass rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\| case|^\| h" $R/b$pass/kernels.md | head -3
awk '/timed as ANCHORS.md/{f=1} f&&/^\| h/{print} f&&/^Mixed|^## All/{exit}' $R/b$pass/kernels.md | sed 's/mla_decode_sm90//; s/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | head -20
grep -E "balanced work list" $R/b$pass/kernels.md | grep -v anchor-method | grep TFLOP | head -2 | awk -F'|' '{print $3, $9}'
done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
echo "total $(( $(date +%s) - T0 ))s"
