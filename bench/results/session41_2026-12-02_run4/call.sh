set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
# The sm90 anchors timed both ways: the table's burst timing and ANCHORS.md's method (1 s idle, median of 50 single launches, NVML clock).
DS_BENCH_SM90_BALANCED_FIRST=1 DS_BENCH_SM90_VARIANTS=15,16 DS_BENCH_SM90_BALANCED=15,16 DS_BENCH_SM90_QBF16=15,16 DS_BENCH_MLA_ANCHOR_METHOD=1 \
  timeout 400 $B/dsinfer bench kernels --only ceilings mla_sm90 --budget-s 330 --commit $(cat $B/COMMIT) --out $R/b > $R/b.log 2>&1
echo "bench rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^Ceilings" $R/b/kernels.md; grep -E "^ceilings" $R/b.log
grep -E "^\| case|^\| h" $R/b/kernels.md | head -10
awk '/timed as ANCHORS.md/{f=1} f&&/^\| h/{print} f&&/^Mixed|^## All/{exit}' $R/b/kernels.md | sed 's/mla_decode_sm90//; s/3wg,ring3,q-in-registers,stage-barriers,lean-softmax/v15/' | head -70
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
