set -uo pipefail
R=$OUT/c14; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
for i in 1 2; do ob cv72_$i "$S1"; ob cv86_$i "$S1" DS_PERSISTENT_CARVEOUT=86; ob cv58_$i "$S1" DS_PERSISTENT_CARVEOUT=58; ob cv100_$i "$S1" DS_PERSISTENT_CARVEOUT=100; done
grep -h "carveout" $R/ob_cv86_1.log $R/ob_cv58_1.log $R/ob_cv100_1.log | head -5
cd $OUT && tar czf c14.tgz c14 && rm -rf c14
echo "total $(( $(date +%s) - T0 ))s"
