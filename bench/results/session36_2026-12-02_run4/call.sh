set -uo pipefail
T0=$(date +%s)
R=$OUT/c4; . scripts/gpu_call_setup.sh
for r in 1 2 3; do
  DS_BENCH_SM90_VARIANTS=0,10 DS_BENCH_SM90_BALANCED=0,10 timeout 200 stdbuf -oL $B/dsinfer bench kernels --only mla_sm90 --commit "$(cat $B/COMMIT)" --budget-s 150 --out $R/k$r > $R/bench$r.log 2>&1
  echo "bench $r rc=$? $(( $(date +%s) - T0 ))s"
  grep -E "^ceilings" $R/bench$r.log
  grep -E "^mla_decode_sm90" $R/bench$r.log | grep -E "half32K|b128 8K" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $4} {for(i=5;i<=NF;i++) if ($i=="us") {print $(i-1); break}}'
done
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
