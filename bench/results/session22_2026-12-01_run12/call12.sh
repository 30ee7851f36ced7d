set -uo pipefail
R=/tmp/c12; . scripts/gpu_call_setup.sh
T0=$(date +%s)
T=CudaMlaDecode.TensorCoresMixedLengths
DS_TEST_SEED=12345 timeout 40 $B/dsinfer_cuda_tests --gtest_filter=$T > $R/seed_a.log 2>&1; echo "a rc=$?"
DS_TEST_SEED=12345 timeout 40 $B/dsinfer_cuda_tests --gtest_filter=$T > $R/seed_b.log 2>&1; echo "b rc=$?"
DS_TEST_SEED=12345 timeout 90 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode.*' > $R/seed_c.log 2>&1; echo "c rc=$?"
DS_TEST_SEED=999 timeout 40 $B/dsinfer_cuda_tests --gtest_filter=$T > $R/seed_d.log 2>&1; echo "d rc=$?"
m() { sed -n "/RUN .*$T\$/,/OK .*$T\|FAILED .*$T/p" $1 | grep "\[metric\]" ; }
m $R/seed_a.log > $R/ma.txt; m $R/seed_b.log > $R/mb.txt; m $R/seed_c.log > $R/mc.txt; m $R/seed_d.log > $R/md.txt
wc -l $R/ma.txt $R/mb.txt $R/mc.txt $R/md.txt
cmp $R/ma.txt $R/mb.txt && echo "a == b (same seed, same test)"
cmp $R/ma.txt $R/mc.txt && echo "a == c (same seed, test inside CudaMlaDecode.*)"
cmp -s $R/ma.txt $R/md.txt && echo "a == d (UNEXPECTED)" || echo "a != d (another seed)"
grep -E "^\[  PASSED|^\[  FAILED" $R/seed_c.log
timeout 120 $B/dsinfer_cuda_tests --gtest_filter='CudaMoePersistent.*:CudaRunnerPersistentMoe.*:CudaMlaAttnPersistent.*:CudaRunnerAttnPersistent.*:CudaFp8GemmSm90*' > $R/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[  PASSED|^\[  FAILED|tests ran" $R/tests.log > $R/tests_summary.txt
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head
tar -C $R -czf $OUT/call12.tgz .
