set -uo pipefail
R=/tmp/s25c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
for i in 1 2 3; do
  ob def_$i "$S1"
  ob c72_$i "$S1" DS_PERSISTENT_CARVEOUT=72
  ob c100_$i "$S1" DS_PERSISTENT_CARVEOUT=100
done
ob c86_1 "$S1" DS_PERSISTENT_CARVEOUT=86
ob tl_def "$S1" DS_STEP_TIMELINE=1
grep -iE "timeline|median" $R/ob_tl_def.log | head -8
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call9.tgz .
