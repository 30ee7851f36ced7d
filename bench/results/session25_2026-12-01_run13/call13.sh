set -uo pipefail
R=/tmp/s25c13; . scripts/gpu_call_setup.sh
T0=$(date +%s)
V2="--model $B/data/deepseek-v2-lite --num-layers 27"
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 40 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90)"
}
S1="$V2 --batch-size 1 --input-len 1024"
EF="DS_ATTN_L2_FETCH=3 DS_MOE_L2_FETCH=3"
for i in 1 2 3; do
  ob def_$i "$S1"
  ob ef_$i "$S1" $EF
  ob p4ef_$i "$S1" $EF DS_ATTN_P1_PAIR=4
  ob p2ef_$i "$S1" $EF DS_ATTN_P1_PAIR=2
  ob p1ef_$i "$S1" $EF DS_ATTN_P1_PAIR=1
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call13.tgz .
