set -uo pipefail
R=$OUT/c4; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 20 > $R/smi_$name.csv 2>&1 &
  local sp=$!
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 256 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  local rc=$?
  kill $sp; wait $sp 2>/dev/null
  echo "$name rc=$rc $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
  awk -F', ' 'NR>1 && $2+0>0 {n++; c+=$2; p+=$4; if($4+0>pm) pm=$4+0; r[$6]++} END {printf "  samples %d mean sm clock %.0f MHz mean power %.0f W max %.0f W reasons:", n, c/n, p/n, pm; for (k in r) printf " %s=%d", k, r[k]; print ""}' $R/smi_$name.csv
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
ob fd "$S1" DS_MOE_FUSED_DOWN=1; ob def "$S1"; ob fd2 "$S1" DS_MOE_FUSED_DOWN=1
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
echo "total $(( $(date +%s) - T0 ))s"
