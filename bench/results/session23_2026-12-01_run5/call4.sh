set -uo pipefail
R=/tmp/c4; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 200 ] && { echo "skip $name"; return; }
  eval "timeout 40 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -1) $(grep -o 'step timeline.*' $R/ob_$name.log)"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
OFF="--disable-overlap-schedule"
run tl_ov "DS_STEP_TIMELINE=1" "$B1"; run tl_off "DS_STEP_TIMELINE=1" "$B1 $OFF"; run ov "" "$B1"; run off "" "$B1 $OFF"
run tl_ov2 "DS_STEP_TIMELINE=1" "$B1"; run tl_off2 "DS_STEP_TIMELINE=1" "$B1 $OFF"
run tl_b8 "DS_STEP_TIMELINE=1" "$V2 --batch-size 8 --input-len 1024 --output-len 64"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call4.tgz .
