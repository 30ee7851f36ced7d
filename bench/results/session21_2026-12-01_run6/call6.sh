# (carry: CARRY_DATA=0 CARRY_BINS=dsinfer_cuda_tests bash scripts/gpu_carry.sh, then moe.cubin: the
# compile command of moe_persistent.cu from build-cuda/compile_commands.json with -cubin and
# -gencode=arch=compute_90a,code=sm_90a only, copied into .carry)
set -uo pipefail
R=/tmp/c6; . scripts/gpu_call_setup.sh
T0=$(date +%s)
timeout 100 $B/dsinfer_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='CudaMoePersistent.DISABLED_V2LiteTimingReport' > $R/moe_timing.log 2>&1
echo "moe timing rc=$? $(( $(date +%s) - T0 ))s"; grep -E "moe_persistent_timing|tail_fold=1" $R/moe_timing.log | sed 's/.*case=V2Lite //' | cut -c1-160
CUOBJ=$(ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1); echo "cuobjdump: $CUOBJ"
[ -n "$CUOBJ" ] && $CUOBJ -sass .carry/moe.cubin > $R/moe_sass.txt 2>&1; echo "sass rc=$? $(wc -l < $R/moe_sass.txt)"
grep -n "Function :" $R/moe_sass.txt | head
echo "total $(( $(date +%s) - T0 ))s"
tar -C $R -czf $OUT/call6.tgz .
