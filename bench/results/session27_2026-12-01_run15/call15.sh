set -uo pipefail
R=$OUT/c15; . scripts/gpu_call_setup.sh
T0=$(date +%s)
ob() {  # name, model + shape args, env assignments...
  local name=$1 args=$2; shift 2
  env "$@" timeout 60 $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-len 64 --output-file $R/ob_$name.json > $R/ob_$name.log 2>&1
  echo "$name rc=$? $(grep -E 'median step' $R/ob_$name.log | head -1 | cut -c1-90) $(grep -o 'carveout [0-9]*% not applied' $R/ob_$name.log | head -2 | tr '\n' ' ')"
}
S1="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024"
for i in 1 2; do
  ob def_$i "$S1"
  for m in 58 44 30 16 -1; do ob moe${m}_$i "$S1" DS_MOE_CARVEOUT=$m; done
  ob all58_$i "$S1" DS_PERSISTENT_CARVEOUT=58
  ob attnd_moe58_$i "$S1" DS_PERSISTENT_CARVEOUT=-1 DS_MOE_CARVEOUT=58
done
S4="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 4096"
ob def_4k "$S4"; ob moe58_4k "$S4" DS_MOE_CARVEOUT=58; ob moe44_4k "$S4" DS_MOE_CARVEOUT=44
cd $OUT && tar czf c15.tgz c15 && rm -rf c15
echo "total $(( $(date +%s) - T0 ))s"
