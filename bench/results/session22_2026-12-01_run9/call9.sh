set -uo pipefail
R=/tmp/c9; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 90 $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecode.TensorCoresMixedLengths' --gtest_repeat=5 > $R/tests_mla.log 2>&1
echo "mla test x5 rc=$? $(( $(date +%s) - T0 ))s"; grep -E "emulating_tc case=V3_h16_half32K_half512_vs_tc " $R/tests_mla.log | sed 's/.*rel_l2=\([^ ]*\).*bound_rel=\([^ ]*\) \(.*\)/\1 \2 \3/'
grep -cE "^\[       OK \]" $R/tests_mla.log
E2E_MODELS="v2-lite" V2_LENS=1024 CONCURRENCY="1" E2E_STAGES="serve" PROFILE_MODELS=none PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=10 SCRIPT_LIMIT_S=170 bash scripts/gpu_e2e.sh > $R/gpu_e2e.txt 2>&1
echo "serve rc=$? $(( $(date +%s) - T0 ))s"; tail -15 $R/gpu_e2e.txt
tar -C $R -czf $OUT/call9.tgz .; ls $OUT
