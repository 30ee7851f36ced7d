set -uo pipefail
T0=$(date +%s)
R=$OUT/c1; . scripts/gpu_call_setup.sh
# Op tests: every sm90 variant, with the new q_bf16 bit-equality block and the paired output stores.
(cd /tmp && timeout 240 stdbuf -oL $B/dsinfer_cuda_tests --gtest_filter='CudaMlaDecodeSm90.*:CudaMlaDecode.*:CudaRunner.DummyV3DecodeSm90QBf16BitEqual:CudaRunner.DummyV3DecodeSm90VariantsBitEqual' > $R/tests.log 2>&1)
echo "tests rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $R/tests.log | head -12
grep -E "q_bf16 vs q:" $R/tests.log | awk '{print $5, $7}' | sort | uniq -c
grep -E "q_bf16 vs q: differing|sm90_v4_vs_v0" $R/tests.log | cut -c1-160
grep -E "vs 10:" $R/tests.log | awk '{print $3, $6}' | sort | uniq -c
gzip -f $R/tests.log
# A/B: fp32 q vs bf16 q (variants 0, 10, 15; balanced 15), per-CTA clocks.
DS_BENCH_SM90_VARIANTS=0,10,15 DS_BENCH_SM90_BALANCED=15 DS_BENCH_SM90_QBF16=0,10,15 DS_BENCH_MLA_CTA_TIMES=1 \
  timeout 300 $B/dsinfer bench kernels --only ceilings mla_sm90 --budget-s 240 --out $R/ab > $R/ab.log 2>&1
echo "ab rc=$? $(( $(date +%s) - T0 ))s"
grep -E "^Ceilings|^\| case|^\| (h|16|128)" $R/ab/kernels.md | head -12
grep "cta-times" $R/ab.log | grep -E "wave [01]:" | grep -E "h128 (b128 4K|b1 32K|b64 4K)( \[[a-z:0-9]+\])* v" | sed -e 's/cycles mean/cyc/' | cut -c1-260
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
echo "total $(( $(date +%s) - T0 ))s"
