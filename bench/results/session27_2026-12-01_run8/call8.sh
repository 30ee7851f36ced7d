set -uo pipefail
R=$OUT/c8; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
S4="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096"
for i in 1 2 3; do ob wo5_$i "$S1" DS_ATTN_WO_STAGE=5; ob def_$i "$S1"; done
ob wo5_4k "$S4" DS_ATTN_WO_STAGE=5; ob def_4k "$S4"
ob wo5_fdr "$S1" DS_ATTN_WO_STAGE=5 DS_MOE_FUSED_DOWN=1 DS_MOE_FD_REGS=1
ob wo5_prof "$S1" DS_ATTN_WO_STAGE=5 DS_CUDA_PROFILE=1; ob def_prof "$S1" DS_CUDA_PROFILE=1
grep -h "phases:" $R/ob_wo5_prof.log $R/ob_def_prof.log | grep -v attn_core | cut -c1-300
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
echo "total $(( $(date +%s) - T0 ))s"
