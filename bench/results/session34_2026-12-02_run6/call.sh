set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
(cd /tmp && timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.RingDenseWithinBounds:CudaRunnerPersistentMoe.DenseWithinBounds:CudaRunnerPersistentMoe.Ring*:CudaMoeRing.*' > $R/tests.log 2>&1)
TRC=$?
echo "tests rc=$TRC $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|Failure|moe_ring_dense graphs|moe_ring_dense.*rows" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED) +\]" $R/tests.log > $R/tests_summary.txt; gzip -f $R/tests.log
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
for rnd in a b c; do
for L in 1k 4k; do
IL=1024; [ $L = 4k ] && IL=4096
ob def_${L}_$rnd "$V2 --input-len $IL"
ob dense_${L}_$rnd "$V2 --input-len $IL" DS_MOE_RING_DENSE=1
done
done
echo "obs $(( $(date +%s) - T0 ))s"
if [ $TRC = 0 ]; then
SW="E2E_MODELS=v2-lite V2_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=150"
for v in def dense; do
  mkdir -p $R/sw_$v
  DN=0; [ $v = dense ] && DN=1
  env $SW DS_MOE_RING_DENSE=$DN E2E_RES=/tmp/e2e_res_$v E2E_STAGES="serve onebatch roofline" OUT=$R/sw_$v bash scripts/gpu_e2e.sh > $R/sw_$v/e2e_stdout.txt 2>&1
  echo "e2e $v rc=$? $(( $(date +%s) - T0 ))s"; grep -E "rates:" $R/sw_$v/e2e_stdout.txt | head -1 | cut -c1-120
  grep -E "^\| 1 \|" $R/sw_$v/summary.md | head -2
done
mkdir -p $R/rates
for i in 1 2 3 4 5; do python3 bench/gpu_rates.py --output-file $R/rates/r_$i.json > /dev/null 2>&1; done
echo "rates $(( $(date +%s) - T0 ))s: $(python3 -c 'import json,glob; print([round(json.load(open(f))["mem_bw_gbps"]) for f in sorted(glob.glob("'$R'/rates/r_*.json"))])')"
fi
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
