set -uo pipefail
R=$OUT/c3; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90) $(grep -o 'device memory in use [0-9.]*' $R/ob_$name.log)"
}
for L in 4 8 16; do
  S="--model $B/data/deepseek-v2-lite --num-layers $L --batch-size 1 --input-len 1024"
  ob fd_L$L "$S" DS_MOE_FUSED_DOWN=1; ob def_L$L "$S"
done
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
ob pdl_fdalloc "$S1" DS_MOE_FUSED_DOWN=1 DS_PERSISTENT_PDL=1; ob pdl "$S1" DS_PERSISTENT_PDL=1
ob pdl_fdalloc2 "$S1" DS_MOE_FUSED_DOWN=1 DS_PERSISTENT_PDL=1; ob pdl2 "$S1" DS_PERSISTENT_PDL=1
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
