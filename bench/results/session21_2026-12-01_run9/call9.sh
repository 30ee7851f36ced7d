set -uo pipefail
R=/tmp/c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 env=$2 args=$3
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
for i in 1 2; do
run def$i "" "$B1"
run tf0_$i "DS_PERSISTENT_MOE_TAIL_FOLD=0" "$B1"
run sf0_$i "DS_PERSISTENT_MOE_SHARED_FIRST=0" "$B1"
run mf2_$i "DS_MOE_L2_FETCH=2" "$B1"
run af0_$i "DS_ATTN_L2_FETCH=0" "$B1"
run ks4_$i "DS_PERSISTENT_MOE_GU_KSPLIT=4" "$B1"
run bps1_$i "DS_PERSISTENT_MOE_BPS=1" "$B1"
run ao0_$i "DS_ATTN_ABSORB_OVERLAP=0" "$B1"
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call9.tgz .
