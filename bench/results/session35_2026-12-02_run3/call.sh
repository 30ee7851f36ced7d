set -uo pipefail
T0=$(date +%s)
R=$OUT/c3; . scripts/gpu_call_setup.sh
for v in old v1; do xz -dc .carry/dsinfer_$v.xz > $B/dsinfer_$v && chmod +x $B/dsinfer_$v; done
cp $B/dsinfer $B/dsinfer_v2
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
obx() {  # obx <name> <binary> <args> [ENV=V ...]
  local name=$1 bin=$2 args=$3; shift 3
  env "$@" timeout 60 "$bin" bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args \
    --output-len "${OL:-64}" --output-file "$R/ob_$name.json" > "$R/ob_$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'median step' "$R/ob_$name.log" | head -1 | cut -c1-60)"
}
for r in 1 2 3; do
  for v in old v1 v2; do OL=128 obx ${v}_4k_$r $B/dsinfer_$v "$V2 --input-len 4064"; done
  for v in old v1 v2; do obx ${v}_1k_$r $B/dsinfer_$v "$V2 --input-len 1024"; done
done
echo "ob done $(( $(date +%s) - T0 ))s"
python3 - $R <<'PY'
import json, sys, glob, os, statistics as st
R = sys.argv[1]
for f in sorted(glob.glob(R + '/ob_*.json')):
    d = json.load(open(f)); name = os.path.basename(f)[3:-5]; by = {}
    for s in d['steps'][1:]: by.setdefault((s['context'] + 31) // 32, []).append(s['ms'])
    print(name, 'median', round(d['step_ms'], 4), ' '.join(f"S{S}:{st.median(v):.3f}" for S, v in sorted(by.items())))
PY
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
echo "total $(( $(date +%s) - T0 ))s"
