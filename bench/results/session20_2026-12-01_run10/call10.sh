set -uo pipefail
R=/tmp/c10; mkdir -p $R
B=/tmp/dsinfer_e2e/bin
mkdir -p /tmp/dsinfer_e2e && xz -dc .carry/bin.tar.xz | tar -C /tmp/dsinfer_e2e -xf -
cp -r tests/data/* $B/data/
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
export DS_TEST_DATA_DIR=$B/data
date -u +%FT%TZ > $R/date.txt; cat $B/COMMIT > $R/commit.txt
timeout 200 $B/dsinfer_cuda_tests --gtest_filter='CudaRunnerPersistentMoe.*:CudaRunnerAttnPersistent.*:CudaMoePersistent.*:CudaMlaAttnPersistent.*' > $R/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[ +FAILED|tests ran" $R/tests.log | head -20
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
tar -C $R -czf $OUT/call10.tgz .
