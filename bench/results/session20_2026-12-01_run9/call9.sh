set -uo pipefail
R=/tmp/c9; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
cp -r tests/data/* $B/data/   # the fixtures (from the checkout; not carried)
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/nvidia_smi.txt 2>&1
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
T0=$(date +%s)
timeout 420 $B/dsinfer_cuda_tests > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran|SKIPPED \] [0-9]" $R/tests.log | head -20
V2='--model $B/data/deepseek-v2-lite --num-layers 27'
OFF="DS_ATTN_ABSORB_OVERLAP=0 DS_PERSISTENT_MOE_SHARED_FIRST=0 DS_ATTN_SPLIT_COUNTER=0 DS_PERSISTENT_MOE_TAIL_FOLD=0"
run() { local name=$1 env=$2 args=$3; [ $(( $(date +%s) - T0 )) -gt 560 ] && { echo "skip $name"; return; }
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $args --output-file $R/ob_$name.json" > $R/ob_$name.log 2>&1
  echo "$name rc=$? [$env] $(grep -E 'median step' $R/ob_$name.log | head -2 | tr '\n' ' ')"; }
B1="$V2 --batch-size 1 --input-len 1024 --output-len 64"
run new "" "$B1"; run off "$OFF" "$B1"; run new2 "" "$B1"; run off2 "$OFF" "$B1"; run new3 "" "$B1"; run off3 "$OFF" "$B1"
run new_4k "" "$V2 --batch-size 1 --input-len 4096 --output-len 64"; run off_4k "$OFF" "$V2 --batch-size 1 --input-len 4096 --output-len 64"
run new_b8 "" "$V2 --batch-size 8 --input-len 1024 --output-len 64"
run v3_b1 "" "--model $B/data/deepseek-v3 --num-layers 8 --batch-size 1 --input-len 1024 --output-len 64"
echo "total $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
tar -C $R -czf $OUT/call9.tgz .
