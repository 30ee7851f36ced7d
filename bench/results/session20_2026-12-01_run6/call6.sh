set -uo pipefail
R=/tmp/c6; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data DS_BINARY=$B/dsinfer
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/nvidia_smi.txt 2>&1
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
T0=$(date +%s)
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaAttnPersistent.*:CudaMoePersistent.*:CudaRunnerAttnPersistent.*:CudaRunnerPersistentMoe.*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
DS_PERSISTENT_PDL=1 timeout 100 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerAttnPersistent.DummyV2LiteWithinBounds:CudaRunnerPersistentMoe.DummyV2LiteWithinBounds' > $R/tests_pdl_env.log 2>&1
echo "pdl-env tests rc=$?"
timeout 150 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMlaAttnPersistent.DISABLED_TimingReport' > $R/timing.log 2>&1
echo "timing rc=$? $(( $(date +%s) - T0 ))s"
grep -E "mla_attn_persistent_timing" $R/timing.log | grep "stamps=0"
grep -E "mla_attn_persistent_phase ctx=1024 in_norm=1 overlap=1 wo_early=1" $R/timing.log | grep -E "barrier|p5" | sed 's/.*segment=//'
M='--model $B/data/deepseek-v2-lite --num-layers 27 --batch-size 1 --input-len 1024 --output-len 64'
for run in def we pdl pdlp all def2 we2 pdl2 pdlp2 all2 def3 all3; do
  case $run in def*) env="";; we*) env="DS_ATTN_WO_EARLY=1";; pdlp*) env="DS_PERSISTENT_PDL=1";; pdl*) env="DS_PERSISTENT_PDL=1 DS_PERSISTENT_PDL_PREFETCH=0";; all*) env="DS_ATTN_WO_EARLY=1 DS_PERSISTENT_PDL=1";; esac
  eval "timeout 60 env $env $B/dsinfer bench one-batch --load-format dummy --device cuda --mem-bw-gbps 3931 --flops-tflops 700 $M --output-file $R/ob_$run.json" > $R/ob_$run.log 2>&1
  echo "$run rc=$? [$env] $(grep -E 'median step' $R/ob_$run.log | head -2 | tr '\n' ' ')"
done
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call6.tgz .
