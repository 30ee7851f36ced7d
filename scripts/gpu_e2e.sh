#!/usr/bin/env bash
# On the GPU machine: issue 7's end-to-end runs (bench/sweep_e2e.sh) on the prebuilt binaries
# that scripts/gpu_carry.sh packed into .carry/bin.tar.xz (run from the repository root):
#   bash scripts/gpu_e2e.sh            (the device tool: carry [".carry"])
# Environment (defaults in brackets):
#   E2E_TESTS=1: dsinfer_cuda_tests first (E2E_TESTS_FILTER, E2E_TESTS_ARGS: more gtest flags, e.g.
#   --gtest_also_run_disabled_tests); E2E_GREEDY_CLI=1: greedy ids via the CLI vs golden;
#   E2E_REALSHAPE=1: issue 4's real-shape V3 run; E2E_KERNELS=1: bench kernels (KERNELS_BUDGET_S [120], KERNELS_ONLY: families)
#   E2E_MODELS ["v2-lite"]: any of v2-lite (27 layers, dummy BF16), v3 (truncated, dummy FP8)
#   V2_LENS, V3_LENS [INPUT_LENS]: per-model input lengths (comma-separated)   PROFILE_MODELS [all]
#   V3_LAYERS [8]   SCRIPT_LIMIT_S [570]: the whole script (results are packed before it)
#   E2E_STAGES ["serve onebatch roofline hf"] (add "trace" for the trace replay on the first
#   model: TRACE_TIME_SCALE, TRACE_DURATION_S; the carried mooncake conversation trace)   plus whatever sweep_e2e.sh reads (CONCURRENCY,
#   INPUT_LENS, PROMPTS_PER_CONC, MIN_PROMPTS, ONE_BATCH_CONC, ONE_BATCH_OUTPUT_LEN, HF_* ...)
#   EXTRA_RUNS: extra one-batch runs (label|env|flags;...), see below
#   PROFILE_RUNS ["1:1024 64:1024"]: batch:input one-batch --profile runs per model (per-layer
#   time by part, eager) for the analysis.
#   E2E_NCU=1: per-kernel device time of a one-batch run under Nsight Compute (ncu; NCU_ENV:
#   VAR=value pairs set for that run only, e.g. DS_OPROJ_NORM=1;
#   --clock-control none, metric gpu__time_duration.sum; NCU_ARGS [V2-Lite, 2 layers, batch 1 x
#   1024, 4 tokens], NCU_TIMEOUT_S [150]) -> logs/ncu.csv and a per-kernel summary
#   (bench/ncu_summary.py) in logs/ncu_summary.txt; NCU_DETAIL (extra ncu flags, e.g. sections
#   for chosen kernels) -> logs/ncu_detail.txt; NCU_FLAGS: extra flags of the per-kernel pass
#   (e.g. --cache-control none: caches kept warm between kernels, as in a graph replay).
#   NCU_PROG: the dsinfer subcommand profiled instead of `bench one-batch --load-format dummy
#   --device cuda` (e.g. 'bench kernels', with NCU_ARGS '--only mla_sm90 ...'); NCU_DETAIL_ONLY=1
#   skips the per-kernel pass (for programs of many kernels).
# Results (JSON, logs, plots, summary.md) come back in $OUT/e2e_results.tgz, with summary.md,
# e2e.json and the plots also as plain files.
#
# Runs longer than one device call (10 minutes; e.g. a trace replay at a time scale that keeps
# up): E2E_DETACH=1 starts this script's whole run detached (setsid nohup, from a private copy of
# scripts/, bench/*.py|sh and .carry under /tmp/e2e_detached, SCRIPT_LIMIT_S from
# DETACHED_LIMIT_S [1500]) and returns after DETACH_WAIT_S [540] with its log so far. A next call
# with E2E_ATTACH=1, made while the machine is still warm (30 s after the call), waits up to
# ATTACH_WAIT_S [540] for it to finish and returns its results. Whether a detached process
# outlives a device call is the device tool's business: ATTACH says plainly when it did not.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/gpu_e2e_out}
mkdir -p "$FINAL"
DET=/tmp/e2e_detached
if [ -n "${E2E_DETACH:-}" ]; then
  rm -rf "$DET" && mkdir -p "$DET/repo/bench" "$DET/out"
  cp -r scripts .carry "$DET/repo/" && cp bench/*.py bench/*.sh "$DET/repo/bench/"
  # Its own results folder, so a foreground run of this script in the same call (before the
  # detach) stays out of the detached run's results.
  E2E_DETACH='' OUT="$DET/out" E2E_RES=/tmp/e2e_results_detached SCRIPT_LIMIT_S=${DETACHED_LIMIT_S:-1500} \
    setsid nohup bash "$DET/repo/scripts/gpu_e2e.sh" >"$DET/log.txt" 2>&1 </dev/null &
  echo $! >"$DET/pid"
  echo "[gpu_e2e] detached: pid $(cat "$DET/pid"), log $DET/log.txt, results $DET/out"
  t=$(date +%s)
  while kill -0 "$(cat "$DET/pid")" 2>/dev/null && [ $(( $(date +%s) - t )) -lt "${DETACH_WAIT_S:-540}" ]; do sleep 5; done
  kill -0 "$(cat "$DET/pid")" 2>/dev/null && echo "[gpu_e2e] still running after $(( $(date +%s) - t )) s: attach with E2E_ATTACH=1" \
    || { echo "[gpu_e2e] the detached run finished"; cp "$DET"/out/* "$FINAL/" 2>/dev/null; }
  cp "$DET/log.txt" "$FINAL/detached_log.txt"
  tail -30 "$DET/log.txt"
  exit 0
fi
if [ -n "${E2E_ATTACH:-}" ]; then
  [ -f "$DET/pid" ] || { echo "[gpu_e2e] attach: no detached run on this machine (a fresh machine?)"; exit 1; }
  t=$(date +%s)
  while kill -0 "$(cat "$DET/pid")" 2>/dev/null && [ $(( $(date +%s) - t )) -lt "${ATTACH_WAIT_S:-540}" ]; do sleep 5; done
  if kill -0 "$(cat "$DET/pid")" 2>/dev/null; then
    echo "[gpu_e2e] attach: still running after $(( $(date +%s) - t )) s more"
  elif [ -f "$DET/out/gpu_e2e.txt" ]; then
    echo "[gpu_e2e] attach: the detached run finished"
  else
    echo "[gpu_e2e] attach: the detached process is gone without results (ended with the earlier call?)"
  fi
  cp "$DET"/out/* "$FINAL/" 2>/dev/null
  cp "$DET/log.txt" "$FINAL/detached_log.txt" 2>/dev/null
  tail -30 "$DET/log.txt" 2>/dev/null
  exit 0
fi
T0=$(date +%s)
START=$T0
LIMIT=${SCRIPT_LIMIT_S:-570}   # the whole script, so results are packed before the call's limit
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
W=/tmp/dsinfer_e2e
mkdir -p $W && xz -dc .carry/bin.tar.xz | tar -C $W -xf - || { echo "no .carry/bin.tar.xz"; exit 1; }
B=$W/bin
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
RES=${E2E_RES:-/tmp/e2e_results}
rm -rf "$RES"   # a warm machine keeps the last call's results
mkdir -p $RES/logs $RES/raw
nvidia-smi > $RES/logs/nvidia_smi.txt 2>&1
# Optional first: the CUDA test binary (op equivalence, fixtures, runner checks), its log and a
# one-line summary per test in the results.
if [ -n "${E2E_TESTS:-}" ]; then
  t=$(date +%s)
  # The carried data dir has the fixtures and the DeepSeek-V3 config (the dummy-V3 runner tests).
  export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
  timeout "${E2E_TESTS_TIMEOUT_S:-200}" $B/dsinfer_cuda_tests --gtest_filter="${E2E_TESTS_FILTER:-*}" ${E2E_TESTS_ARGS:-} \
    > $RES/logs/cuda_tests.log 2>&1
  echo "[gpu_e2e] dsinfer_cuda_tests rc=$? in $(( $(date +%s) - t )) s" | tee -a $RES/logs/gpu_e2e.txt
  grep -E "^\[ +(OK|FAILED) +\]|^\[  PASSED|^\[  FAILED|\[fixture\]|\[metric\]" $RES/logs/cuda_tests.log \
    > $RES/logs/cuda_tests_summary.txt
  grep -E "FAILED" $RES/logs/cuda_tests_summary.txt | tee -a $RES/logs/gpu_e2e.txt
  cp $RES/logs/cuda_tests_summary.txt "$FINAL/"
  T0=$(date +%s)  # the e2e budget starts after the tests
fi
# Optional: free-running greedy generation through the CLI on every fixture (cpu, cuda default
# numerics, cuda --precise-activations) against golden's greedy ids (scripts/greedy_cli_check.py).
if [ -n "${E2E_GREEDY_CLI:-}" ]; then
  t=$(date +%s)
  timeout 120 python3 scripts/greedy_cli_check.py --dsinfer $B/dsinfer --data $B/data > $RES/logs/greedy_cli.log 2>&1
  echo "[gpu_e2e] greedy CLI check rc=$? in $(( $(date +%s) - t )) s" | tee -a $RES/logs/gpu_e2e.txt
  cat $RES/logs/greedy_cli.log | tee -a $RES/logs/gpu_e2e.txt
  cp $RES/logs/greedy_cli.log "$FINAL/"
  T0=$(date +%s)
fi
# Optional: issue 5's kernel benchmark (`dsinfer bench kernels`, every family, cut by
# KERNELS_BUDGET_S): kernels.json + kernels.md in the results and as plain files.
if [ -n "${E2E_KERNELS:-}" ]; then
  t=$(date +%s)
  mkdir -p $RES/kernels
  timeout $(( ${KERNELS_BUDGET_S:-120} + 60 )) $B/dsinfer bench kernels --budget-s "${KERNELS_BUDGET_S:-120}" --out $RES/kernels \
    --commit "$(cat $B/COMMIT)" ${KERNELS_ONLY:+--only $KERNELS_ONLY} > $RES/logs/bench_kernels.log 2>&1
  echo "[gpu_e2e] bench kernels rc=$? in $(( $(date +%s) - t )) s" | tee -a $RES/logs/gpu_e2e.txt
  cp $RES/kernels/kernels.json $RES/kernels/kernels.md "$FINAL/" 2>/dev/null
  T0=$(date +%s)
fi
# Optional: issue 4's real-shape run (DeepSeek-V3 config, dummy FP8, REALSHAPE_LAYERS layers,
# 64 prompts x 2,048 tokens, 256 generated; prints prefill time and decode step time).
if [ -n "${E2E_REALSHAPE:-}" ]; then
  t=$(date +%s)
  timeout "${REALSHAPE_TIMEOUT_S:-150}" $B/dsinfer generate --device cuda --model $B/data/deepseek-v3 --load-format dummy \
    --num-layers "${REALSHAPE_LAYERS:-13}" --bench-batch 64 --bench-prompt-len 2048 --max-tokens 256 \
    > $RES/logs/realshape_v3.log 2>&1
  echo "[gpu_e2e] real-shape V3 rc=$? in $(( $(date +%s) - t )) s" | tee -a $RES/logs/gpu_e2e.txt
  grep -E "cuda runner:|bench:|prefill_ms|decode_step_ms|nonfinite|load_ms" $RES/logs/realshape_v3.log | tee -a $RES/logs/gpu_e2e.txt
  T0=$(date +%s)
fi
# Optional: per-kernel device time of one one-batch run under Nsight Compute (each kernel
# replayed alone, caches flushed between kernels: ncu's defaults; clocks left alone).
if [ -n "${E2E_NCU:-}" ]; then
  t=$(date +%s)
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -z "$NCU" ]; then
    echo "[gpu_e2e] ncu: not found" | tee -a $RES/logs/gpu_e2e.txt
  else
    [ -z "${NCU_DETAIL_ONLY:-}" ] && eval "timeout ${NCU_TIMEOUT_S:-150} env ${NCU_ENV:-} $NCU --clock-control none ${NCU_FLAGS:-} --metrics gpu__time_duration.sum --csv --print-units base \
      $B/dsinfer ${NCU_PROG:-bench one-batch --load-format dummy --device cuda} \
      ${NCU_ARGS:---model $B/data/deepseek-v2-lite --num-layers 2 --batch-size 1 --input-len 1024 --output-len 4 --mem-bw-gbps 3931 --flops-tflops 700}" \
      > $RES/logs/ncu.csv 2> $RES/logs/ncu_stderr.txt
    echo "[gpu_e2e] ncu rc=$? in $(( $(date +%s) - t )) s ($NCU)" | tee -a $RES/logs/gpu_e2e.txt
    python3 bench/ncu_summary.py $RES/logs/ncu.csv > $RES/logs/ncu_summary.txt 2>&1
    head -60 $RES/logs/ncu_summary.txt | tee -a $RES/logs/gpu_e2e.txt
    cp $RES/logs/ncu.csv $RES/logs/ncu_summary.txt "$FINAL/" 2>/dev/null
    # Optional detail pass: NCU_DETAIL = extra ncu flags (e.g. --kernel-name regex:Skinny
    # --launch-count 12 --section SpeedOfLight --section WarpStateStats), same program args.
    if [ -n "${NCU_DETAIL:-}" ]; then
      t=$(date +%s)
      eval "timeout ${NCU_TIMEOUT_S:-150} env ${NCU_ENV:-} $NCU --clock-control none $NCU_DETAIL \
        $B/dsinfer ${NCU_PROG:-bench one-batch --load-format dummy --device cuda} \
        ${NCU_ARGS:---model $B/data/deepseek-v2-lite --num-layers 2 --batch-size 1 --input-len 1024 --output-len 4 --mem-bw-gbps 3931 --flops-tflops 700}" \
        > $RES/logs/ncu_detail.txt 2>&1
      echo "[gpu_e2e] ncu detail rc=$? in $(( $(date +%s) - t )) s" | tee -a $RES/logs/gpu_e2e.txt
      cp $RES/logs/ncu_detail.txt "$FINAL/" 2>/dev/null
    fi
  fi
  T0=$(date +%s)
fi
E2E_MODELS=${E2E_MODELS:-v2-lite}
V3_LAYERS=${V3_LAYERS:-8}
SPECS=""
for m in $E2E_MODELS; do
  case $m in
    v2-lite) SPECS="$SPECS v2-lite:$B/data/deepseek-v2-lite:27:bf16:${V2_LENS:-}" ;;
    v3) SPECS="$SPECS v3:$B/data/deepseek-v3:$V3_LAYERS:fp8:${V3_LENS:-}" ;;
    *) echo "unknown model $m" ;;
  esac
done
[ -n "${E2E_SPECS:-}" ] && SPECS=$E2E_SPECS   # name:dir:layers:dtype list (tests of this script)
export COMMIT=$(cat $B/COMMIT)
# New sweep points stop starting E2E_POINT_MARGIN_S before the sweep's time is up.
export DEADLINE=$(( START + LIMIT - ${PROFILE_RESERVE_S:-60} - ${E2E_POINT_MARGIN_S:-45} ))
export DEVICE=${DEVICE:-cuda}
export DSINFER=$B/dsinfer PYTHON=${PYTHON:-python3} OUT_DIR=$RES MODEL_SPECS="$SPECS"
export STAGES="${E2E_STAGES:-serve onebatch roofline hf} records plot analyze"
export PROMPTS_PER_CONC=${PROMPTS_PER_CONC:-1} MIN_PROMPTS=${MIN_PROMPTS:-4}
export ONE_BATCH_CONC=${ONE_BATCH_CONC:-"1 8 64"} ONE_BATCH_OUTPUT_LEN=${ONE_BATCH_OUTPUT_LEN:-64}
export HF_BATCH=${HF_BATCH:-"1 8"} HF_INPUT_LENS=${HF_INPUT_LENS:-1024} HF_OUTPUT_LEN=${HF_OUTPUT_LEN:-64}
export SERVE_ARGS=${SERVE_ARGS:-"--max-running-requests 256 --max-num-batched-tokens 8192"}
[ -f $B/data/traces/mooncake_conversation_trace.jsonl ] && export TRACE_FILE=${TRACE_FILE:-$B/data/traces/mooncake_conversation_trace.jsonl}
export BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-300} SERVER_WAIT_S=${SERVER_WAIT_S:-300}
echo "[gpu_e2e] commit $COMMIT models: $SPECS; stages: $STAGES; script limit ${LIMIT} s" | tee -a $RES/logs/gpu_e2e.txt
SWEEP_S=$(( $(left) - ${PROFILE_RESERVE_S:-60} ))
if [ "$SWEEP_S" -gt 30 ]; then
  timeout "$SWEEP_S" bash bench/sweep_e2e.sh 2>&1 | tee -a $RES/logs/gpu_e2e.txt
  echo "[gpu_e2e] sweep rc=${PIPESTATUS[0]} (timeout ${SWEEP_S} s)" | tee -a $RES/logs/gpu_e2e.txt
  pkill -f "$B/dsinfer serve" 2>/dev/null; sleep 1
  # A timed-out sweep skipped its own assembly: assemble what was measured.
  [ -f $RES/e2e.json ] || { python3 bench/e2e_records.py --raw $RES/raw --out $RES/e2e.json --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" --commit "$COMMIT";
    python3 bench/plot_e2e.py $RES/e2e.json --out-dir $RES; python3 bench/analyze_e2e.py $RES/e2e.json --raw $RES/raw --out $RES/summary.md > /dev/null; } 2>&1 | tail -3
fi
# Per-layer time by part (profiled eager passes) for the analysis.
for spec in $SPECS; do
  IFS=: read -r name dir layers dtype lens <<< "$spec"
  [[ " ${PROFILE_MODELS:-$E2E_MODELS} " == *" $name "* ]] || continue
  for pr in ${PROFILE_RUNS:-"1:1024 64:1024"}; do
    IFS=: read -r pb pl <<< "$pr"
    [ "$(left)" -lt 40 ] && { echo "[gpu_e2e] no time left: skipping profile $name $pb:$pl" | tee -a $RES/logs/gpu_e2e.txt; continue; }
    timeout $(( $(left) - 25 )) $B/dsinfer bench one-batch --model "$dir" --load-format dummy --num-layers "$layers" --batch-size "$pb" \
      --input-len "$pl" --output-len 16 --device $DEVICE --profile --mem-bw-gbps 3931 --flops-tflops 700 \
      --output-file "$RES/raw/profile_${name}_in${pl}_b${pb}.json" > "$RES/logs/profile_${name}_in${pl}_b${pb}.txt" 2>&1
    grep -E "device time by part|phases:" "$RES/logs/profile_${name}_in${pl}_b${pb}.txt" | tee -a $RES/logs/gpu_e2e.txt
  done
done
# Extra one-batch runs for A/B figures: EXTRA_RUNS="label|ENV=V ...|one-batch flags;..." ($B
# expands to the carried bin dir), each written to raw/extra_<label>.json and logs/extra_<label>.txt.
IFS=';' read -ra EXTRA <<< "${EXTRA_RUNS:-}"
for ex in "${EXTRA[@]}"; do
  [ -z "$ex" ] && continue
  IFS='|' read -r xl xenv xargs <<< "$ex"
  [ "$(left)" -lt 40 ] && { echo "[gpu_e2e] no time left: skipping extra run $xl" | tee -a $RES/logs/gpu_e2e.txt; continue; }
  xol="--output-len 16"; [[ "$xargs" == *--output-len* ]] && xol=""  # the run's own --output-len wins
  # AB_BIN=path in the ENV field: run that dsinfer binary instead (an A/B against another build,
  # e.g. carried as .carry/old/dsinfer; same shared libraries).
  xbin=$(sed -n 's/.*AB_BIN=\([^ ]*\).*/\1/p' <<< "$xenv"); xbin=${xbin:-$B/dsinfer}
  eval "timeout $(( $(left) - 25 )) env $xenv $xbin bench one-batch --load-format dummy $xol --device cuda \
    --mem-bw-gbps 3931 --flops-tflops 700 $xargs --output-file $RES/raw/extra_${xl}.json" > "$RES/logs/extra_${xl}.txt" 2>&1
  echo "[gpu_e2e] extra run $xl rc=$?" | tee -a $RES/logs/gpu_e2e.txt
  grep -E "^prefill|median step|device time by part|phases:" "$RES/logs/extra_${xl}.txt" | head -8 | tee -a $RES/logs/gpu_e2e.txt
done
# Re-run the analysis so it includes the profiles.
[ -f $RES/e2e.json ] && python3 bench/analyze_e2e.py $RES/e2e.json --raw $RES/raw --out $RES/summary.md > /dev/null 2>&1
echo "[gpu_e2e] done in $(( $(date +%s) - T0 )) s" | tee -a $RES/logs/gpu_e2e.txt
tar -C "$(dirname "$RES")" -czf "$FINAL/e2e_results.tgz" "$(basename "$RES")"
for f in summary.md e2e.json throughput_vs_concurrency.svg pareto.svg; do [ -f $RES/$f ] && cp $RES/$f "$FINAL/"; done
cp $RES/logs/gpu_e2e.txt "$FINAL/"
tail -40 $RES/logs/gpu_e2e.txt
