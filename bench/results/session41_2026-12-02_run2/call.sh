set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
# 1. The timeline of 15 and 16 at h128 b128 x 4K (where warpgroup 0 waits).
DS_BENCH_SM90_VARIANTS=15,16 DS_BENCH_SM90_BALANCED=none DS_BENCH_SM90_QBF16=none DS_BENCH_MLA_TIMELINE=1 DS_BENCH_MLA_ANCHOR="h128 b128 4K" \
  timeout 100 $B/dsinfer bench kernels --only mla_sm90 --budget-s 60 --out $R/tl > $R/tl.log 2>&1
echo "timeline rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^timeline.*wg[0-2]:" $R/tl.log | cut -c1-260
# 2. Soak A/B (sustained loops, NVML energy counter): 15 vs 16 at every anchor (16 heads: 16 runs 15, a null check).
DS_BENCH_SM90_VARIANTS=15,16 DS_BENCH_SM90_BALANCED=none DS_BENCH_SM90_QBF16=none DS_BENCH_MLA_SOAK=15,16 DS_BENCH_MLA_SOAK_MS=1500 DS_BENCH_MLA_SOAK_ROUNDS=3 \
  timeout 300 $B/dsinfer bench kernels --only mla_sm90 --budget-s 250 --out $R/soak > $R/soak.log 2>&1
echo "soak rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^soak" $R/soak.log | sed 's/ (energy counter)//; s/ mean reading//' | cut -c1-230
grep -E "^\| case|^\| h" $R/soak/kernels.md | head -10
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
