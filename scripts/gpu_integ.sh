#!/usr/bin/env bash
# First GPU run of the integration branch `integ` (main + decfuse + mixedgemm + mladec3, every
# new feature off by default), one device call:
#   a. dsinfer_cuda_tests: main's suite with the defaults (the unverified branches' tests left
#      out of it, the sm_90a decode op tests at variant 0 only), then each branch's tests in their
#      own process (a trapped or hung new kernel poisons only its process):
#        decfuse   ops (CudaMoeRoutePermute/CombineNorm/RmsNormBf16Copy/MoeSharedFused/RopeQpeCopy)
#                  and the whole-model fused-vs-unfused checks (CudaRunnerFused.*);
#        mixedgemm CudaGroupedGemmSm90Mixed.* and CudaRunner.DummyV3Sm90MixedGemmMatchesMmaSync;
#        mladec3   CudaMlaDecodeSm90.* with DS_TEST_SM90_VARIANTS=1, then =2 (seesaw variants vs
#                  the CPU, the emulation and variant 0), and the seesaw runner check (variant 1);
#   b. one-batch A/B figures (dummy weights; `dsinfer bench one-batch`, CUDA graphs on):
#        V2-Lite (27 layers) 1 x 1024 and 8 x 1024, output 64: default vs DS_FUSED_DECODE=1;
#        V3 (8 layers) 64 x 1024, output 16: default vs DS_SM90_MIXED_GEMM=1 (prefill);
#        V3 (8 layers) 1 x 1024, output 32: default vs DS_FUSED_DECODE=1 (decode);
#   c. `dsinfer bench kernels --only mla_sm90` (~60 s): the seesaw variants vs variant 0 and the
#      default tensor-core decode (a variant whose op tests failed is not timed).
# Every stage checks the time left (TOTAL_S, default 540) and runs under `timeout`.
#
# Here (no GPU), from the integ worktree: build build-cuda (dsinfer, dsinfer_cuda_tests), then
#   bash scripts/gpu_carry.sh /work/main/build-gpu-integ && cp scripts/gpu_integ.sh /work/main/build-gpu-integ/
# There: device tool `run` with carry ["build-gpu-integ"], timeout_s 600, command
#   bash build-gpu-integ/gpu_integ.sh
# Results in $OUT (at most 8 files come back): summary.txt (stage lines, one line per test,
# fixture metrics of the branch tests, the A/B figures), tests.log (every test invocation's
# full output), onebatch.json (the one-batch JSON records by label), kernels.json, kernels.md,
# logs.tgz (nvidia-smi, per-stage logs, one-batch console output, bench log).
set -uo pipefail
T_START=$(date +%s)
TOTAL_S=${TOTAL_S:-540}
left() { echo $(( TOTAL_S - ($(date +%s) - T_START) )); }
D=$(cd "$(dirname "$0")" && pwd)
CARRY=$(cd "${1:-$D}" && pwd)
OUT=${OUT:-/tmp/gpu_integ_out}
mkdir -p "$OUT"
W=/tmp/dsinfer_integ
L=/tmp/gpu_integ_logs
rm -rf "$W" "$L" && mkdir -p "$W" "$L/tests" "$L/onebatch"
xz -dc "$CARRY/bin.tar.xz" | tar -C "$W" -xf - || { echo "unpack of $CARRY/bin.tar.xz failed"; exit 1; }
B=$W/bin
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
COMMIT=$(cat "$B/COMMIT" 2>/dev/null || echo unknown)
S=$OUT/summary.txt
TLOG=$OUT/tests.log
: >"$S"; : >"$TLOG"
note() { echo "$*" | tee -a "$S"; }
note "== gpu_integ $(date -u +%FT%TZ) commit $COMMIT"
nvidia-smi >"$L/nvidia_smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"

# ---- a. tests --------------------------------------------------------------------------------
BENCH_RESERVE_S=${BENCH_RESERVE_S:-200}  # what the tests leave for b + c
# One line per test of a gtest log: PASS / FAIL / SKIP, and the test that was running when the
# process died or was killed (CRASH_OR_TIMEOUT).
per_test() {
  awk '/^\[ RUN      \]/ {cur = $4}
       /^\[       OK \]/ {print "  PASS " $4; cur = ""}
       /^\[  FAILED  \]/ && $5 ~ /^\(/ {print "  FAIL " $4; cur = ""}
       /^\[  SKIPPED \]/ && $5 ~ /^\(/ {print "  SKIP " $4; cur = ""}
       END {if (cur != "") print "  CRASH_OR_TIMEOUT " cur}' "$1"
}
declare -A RC
# run_tests LABEL CAP_S FILTER [ENV=V ...]: one test process, bounded by CAP_S and by the time
# the benches need; its result lines into the summary, its output into tests.log.
run_tests() {
  local label=$1 cap=$2 filter=$3; shift 3
  local lim=$(( $(left) - BENCH_RESERVE_S ))
  [ "$lim" -gt "$cap" ] && lim=$cap
  if [ "$lim" -lt 20 ]; then note "tests $label: skipped (time: $(left) s left)"; RC[$label]=skipped; return; fi
  local log=$L/tests/$label.log t0=$(date +%s)
  # shellcheck disable=SC2086
  env "$@" timeout -k 5 "$lim" "$B/dsinfer_cuda_tests" --gtest_color=no --gtest_filter="$filter" ${GTEST_EXTRA:-} >"$log" 2>&1
  local rc=$?
  RC[$label]=$rc
  { echo "===== tests $label (env: ${*:-none}; filter $filter): rc=$rc"; cat "$log"; } >>"$TLOG"
  local np nf ns
  np=$(per_test "$log" | grep -c ' PASS '); nf=$(per_test "$log" | grep -cE ' FAIL | CRASH_OR_TIMEOUT ')
  ns=$(per_test "$log" | grep -c ' SKIP ')
  note "tests $label (env: ${*:-none}): rc=$rc$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ' TIMEOUT') in $(( $(date +%s) - t0 )) s (limit $lim s): $np passed, $nf failed, $ns skipped"
  per_test "$log" | tee -a "$S"
}
fixtures() {  # the branch tests' [fixture] metric lines (first 40) into the summary
  grep -E '^\[fixture\]' "$L/tests/$1.log" 2>/dev/null | head -40 | sed 's/^\[fixture\] /    /' | tee -a "$S"
}
DECFUSE_TESTS='CudaMoeRoutePermute.*:CudaMoeCombineNorm.*:CudaRmsNormBf16Copy.*:CudaMoeSharedFused.*:CudaRopeQpeCopy.*'
DECFUSE_RUNNER='CudaRunnerFused.*'
MIXED_TESTS='CudaGroupedGemmSm90Mixed.*:CudaRunner.DummyV3Sm90MixedGemmMatchesMmaSync'
SEESAW_RUNNER='CudaRunner.DummyV3DecodeSm90SeesawMatchEmulation'
run_tests default 300 "-$DECFUSE_TESTS:$DECFUSE_RUNNER:$MIXED_TESTS:$SEESAW_RUNNER" DS_TEST_SM90_VARIANTS=0
run_tests decfuse_ops 60 "$DECFUSE_TESTS"
fixtures decfuse_ops
run_tests decfuse_runner 150 "$DECFUSE_RUNNER"
fixtures decfuse_runner
run_tests mixedgemm 90 "$MIXED_TESTS"
fixtures mixedgemm
run_tests mladec3_v1 75 "CudaMlaDecodeSm90.*:$SEESAW_RUNNER" DS_TEST_SM90_VARIANTS=1
grep -hE 'sm90_seesaw|v0_vs_seesaw' "$L/tests/mladec3_v1.log" 2>/dev/null | head -6 | sed 's/^/    /' | tee -a "$S"
run_tests mladec3_v2 60 "CudaMlaDecodeSm90.*" DS_TEST_SM90_VARIANTS=2
# The disabled gate of the opt-in sm_90a decode kernel under CUDA graphs (4 layers with MoE, and
# 3 dense layers only): how far graph and eager passes differ.
GTEST_EXTRA=--gtest_also_run_disabled_tests run_tests sm90_graph_diag 40 "CudaRunner.DISABLED_GraphDecodeMatchesEager*"
grep -hE 'sm90-decode cuda_graphs_vs_eager' "$L/tests/sm90_graph_diag.log" 2>/dev/null | sed 's/^\[fixture\] /    /' | tee -a "$S"

# ---- b. one-batch A/B -----------------------------------------------------------------------
KERNELS_RESERVE_S=75
V2=$B/data/deepseek-v2-lite
V3=$B/data/deepseek-v3
# label|env|flags
RUNS="v2lite_b1_default||--model $V2 --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64
v2lite_b1_fused|DS_FUSED_DECODE=1|--model $V2 --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64
v2lite_b8_default||--model $V2 --num-layers 27 --batch-size 8 --input-len 1024 --output-len 64
v2lite_b8_fused|DS_FUSED_DECODE=1|--model $V2 --num-layers 27 --batch-size 8 --input-len 1024 --output-len 64
v3_b64_default||--model $V3 --num-layers 8 --batch-size 64 --input-len 1024 --output-len 16
v3_b64_mixed|DS_SM90_MIXED_GEMM=1|--model $V3 --num-layers 8 --batch-size 64 --input-len 1024 --output-len 16
v3_b1_default||--model $V3 --num-layers 8 --batch-size 1 --input-len 1024 --output-len 32
v3_b1_fused|DS_FUSED_DECODE=1|--model $V3 --num-layers 8 --batch-size 1 --input-len 1024 --output-len 32"
note "== one-batch A/B (dummy weights; prefill ms, median decode step ms)"
while IFS='|' read -r label envs flags; do
  [ -z "$label" ] && continue
  lim=$(( $(left) - KERNELS_RESERVE_S ))
  [ "$lim" -gt 90 ] && lim=90
  if [ "$lim" -lt 25 ]; then note "onebatch $label: skipped (time: $(left) s left)"; continue; fi
  t0=$(date +%s)
  # shellcheck disable=SC2086
  env $envs timeout -k 5 "$lim" "$B/dsinfer" bench one-batch --device cuda --load-format dummy \
    --mem-bw-gbps 3931 --flops-tflops 700 $flags --output-file "$L/onebatch/$label.json" >"$L/onebatch/$label.txt" 2>&1
  rc=$?
  pre=$(grep -m1 -oE '^prefill: [0-9.]+ ms \([0-9.]+ tok/s\)' "$L/onebatch/$label.txt")
  dec=$(grep -m1 -oE '^decode: median step [0-9.]+ ms \(mean [0-9.]+, p90 [0-9.]+\)' "$L/onebatch/$label.txt")
  note "onebatch $label (env: ${envs:-none}): rc=$rc in $(( $(date +%s) - t0 )) s | ${pre:-no prefill line} | ${dec:-no decode line}"
  [ $rc -ne 0 ] && tail -3 "$L/onebatch/$label.txt" | cut -c1-300 | sed 's/^/    /' | tee -a "$S"
done <<<"$RUNS"
# The records as one JSON object {label: record} (one file back instead of eight).
{
  echo "{"; first=1
  for f in "$L"/onebatch/*.json; do
    [ -s "$f" ] || continue
    [ $first = 1 ] || echo ","
    first=0; printf '"%s": ' "$(basename "$f" .json)"; cat "$f"
  done
  echo "}"
} >"$OUT/onebatch.json"

# ---- c. MLA sm_90a decode kernels: seesaw variants vs variant 0 ----------------------------------
skip_ss=""
[ "${RC[mladec3_v1]:-x}" != 0 ] && skip_ss="${skip_ss}1"
[ "${RC[mladec3_v2]:-x}" != 0 ] && skip_ss="${skip_ss}2"
lim=$(( $(left) - 10 ))
if [ "${RC[default]:-x}" = 124 ] || [ "${RC[default]:-x}" = 137 ]; then
  note "bench kernels mla_sm90: skipped (the default suite timed out: hung kernel?)"
elif [ "$lim" -lt 25 ]; then
  note "bench kernels mla_sm90: skipped (time: $(left) s left)"
else
  budget=$(( lim - 20 )); [ $budget -gt 60 ] && budget=60
  [ $lim -gt $(( budget + 40 )) ] && lim=$(( budget + 40 ))
  t0=$(date +%s)
  DS_BENCH_SKIP_SM90_SEESAW=$skip_ss timeout -k 5 "$lim" "$B/dsinfer" bench kernels --only mla_sm90 --budget-s "$budget" \
    --out "$OUT" --commit "$COMMIT" >"$L/bench_kernels.log" 2>&1
  note "bench kernels mla_sm90 (seesaw variants not timed: '${skip_ss}'): rc=$? in $(( $(date +%s) - t0 )) s (budget $budget s)"
  grep -E '^(mla_decode|ceilings)' "$L/bench_kernels.log" | head -30 | sed 's/^/    /' | tee -a "$S"
  tail -2 "$L/bench_kernels.log" | cut -c1-300 | sed 's/^/    /' | tee -a "$S"
fi

note "== done $(date -u +%FT%TZ) ($(( $(date +%s) - T_START )) s)"
tar -C /tmp -czf "$OUT/logs.tgz" "$(basename "$L")" 2>/dev/null
ls -la "$OUT"
