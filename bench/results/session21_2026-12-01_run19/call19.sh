set -uo pipefail
R=/tmp/c19; . scripts/gpu_call_setup.sh
xz -dc .carry/dsinfer_old.xz > $B/dsinfer_old && chmod +x $B/dsinfer_old
T0=$(date +%s)
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
run() { local name=$1 bin=$2 env=$3 args=$4
  eval "timeout 60 env $env $B/$bin bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$bin $env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ') $(( $(date +%s) - T0 ))s"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
for i in 1 2 3 4; do run new$i dsinfer "" "$B1"; run old$i dsinfer_old "" "$B1"; done
run new_4k dsinfer "" "$V2 --batch-size 1 --input-len 4096 --output-len 64"; run old_4k dsinfer_old "" "$V2 --batch-size 1 --input-len 4096 --output-len 64"
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call19.tgz .
