set -uo pipefail
T0=$(date +%s)
R=$OUT/c7; . scripts/gpu_call_setup.sh
# The MLA families at the final commit with the bench's default variant lists (0, 10-13; balanced 10, 13).
timeout 200 $B/dsinfer bench kernels --only ceilings mla_anchors mla_sm90 --budget-s 180 --commit $(cat $B/COMMIT) --out $R/mla > $R/mla.log 2>&1
echo "mla rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^Ceilings|^\| case|^\| (h|16|128)|^Mixed" $R/mla/kernels.md | head -40
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
echo "total $(( $(date +%s) - T0 ))s"
