set -uo pipefail
R=/tmp/s25c11; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
timeout 200 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.L2FetchBitIdentical:CudaMoePersistent.*:CudaMlaAttnPersistent.RejectsUnsupported' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
grep -B3 -A12 "Failure" $R/tests.log | head -40
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do
  ob def_$i "$S1"
  ob ef_$i "$S1" DS_ATTN_L2_FETCH=3 DS_MOE_L2_FETCH=3
  ob efm_$i "$S1" DS_MOE_L2_FETCH=3
  ob efc_$i "$S1" DS_ATTN_L2_FETCH=3 DS_MOE_L2_FETCH=3 DS_PERSISTENT_CARVEOUT=72
done
ob ef_4k "$V2 --batch-size 1 --input-len 4096" DS_ATTN_L2_FETCH=3 DS_MOE_L2_FETCH=3; ob def_4k "$V2 --batch-size 1 --input-len 4096"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call11.tgz .
