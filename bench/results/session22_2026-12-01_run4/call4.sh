set -uo pipefail
R=/tmp/c4; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, extra-args-var, env assignments...
  local name=$1 extra=$2; shift 2
  env "$@" timeout 30 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $V2 --batch-size 1 --input-len 1024 --output-len 64 $extra --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1)"
}
for i in 1 2 3; do
  ob base_$i "" X=1
  ob skinny_$i "" DS_SKINNY_BF16_MAX_MWEIGHTS=256
done
ob prof_base "--profile" X=1
ob prof_skinny "--profile" DS_SKINNY_BF16_MAX_MWEIGHTS=256
sed -n '/median step/,$p' $R/ob_prof_base.log | head -40
grep -A12 "median step" $R/ob_prof_skinny.log | head -16
echo "done $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call4.tgz .
