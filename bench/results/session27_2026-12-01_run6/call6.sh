set -uo pipefail
R=$OUT/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
for i in 1 2; do ob fd_$i "$S1" DS_MOE_FUSED_DOWN=1; ob fdd_$i "$S1" DS_MOE_FUSED_DOWN=1 DS_MOE_FD_DISCARD=1; ob def_$i "$S1"; done
ob fdd_prof "$S1" DS_MOE_FUSED_DOWN=1 DS_MOE_FD_DISCARD=1 DS_CUDA_PROFILE=1
grep -h "phases:" $R/ob_fdd_prof.log | tail -1 | cut -c1-400
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
