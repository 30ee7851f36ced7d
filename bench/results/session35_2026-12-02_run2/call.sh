set -uo pipefail
T0=$(date +%s)
R=$OUT/c2; . scripts/gpu_call_setup.sh
xz -dc .carry/dsinfer_old.xz > $B/dsinfer_old && chmod +x $B/dsinfer_old
V2="--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1"
(cd /tmp && timeout 240 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests ran" $R/tests.log | head -20
obx() {  # obx <name> <binary> <args> [ENV=V ...]
  local name=$1 bin=$2 args=$3; shift 3
  env "$@" timeout 60 "$bin" bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args \
    --output-len "${OL:-64}" --output-file "$R/ob_$name.json" > "$R/ob_$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'median step' "$R/ob_$name.log" | head -1 | cut -c1-60)"
}
for r in 1 2 3; do
  OL=128 obx old_4k_$r $B/dsinfer_old "$V2 --input-len 4064"
  OL=128 obx new_4k_$r $B/dsinfer "$V2 --input-len 4064" DS_ATTN_MERGE_PRELOAD=0
  OL=128 obx pre_4k_$r $B/dsinfer "$V2 --input-len 4064" DS_ATTN_MERGE_PRELOAD=1
  obx old_1k_$r $B/dsinfer_old "$V2 --input-len 1024"
  obx new_1k_$r $B/dsinfer "$V2 --input-len 1024" DS_ATTN_MERGE_PRELOAD=0
  obx pre_1k_$r $B/dsinfer "$V2 --input-len 1024" DS_ATTN_MERGE_PRELOAD=1
done
echo "ob done $(( $(date +%s) - T0 ))s"
python3 - $R <<'PY'
import json, sys, glob, os, statistics as st
R = sys.argv[1]
rows = {}
for f in sorted(glob.glob(R + '/ob_*.json')):
    d = json.load(open(f)); name = os.path.basename(f)[3:-5]
    steps = d.get('steps') or []
    by = {}
    for s in steps[1:]:
        ctx = s.get('context') or s.get('context_len'); t = s.get('time_ms') or s.get('ms')
        if ctx is None or t is None: continue
        S = (ctx + 31) // 32
        by.setdefault(S, []).append(t)
    print(name, 'median', round(d['step_ms'], 4), ' '.join(f"S{S}:{st.median(v):.3f}" for S, v in sorted(by.items())))
PY
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
echo "total $(( $(date +%s) - T0 ))s"
