set -uo pipefail
T0=$(date +%s)
R=$OUT/c6; . scripts/gpu_call_setup.sh
export DS_MOE_ROUTER_TAGGED=1
E2E_MODELS="v2-lite v3" V2_LENS=1024,4096 V3_LENS=1024,4096 CONCURRENCY=1 ONE_BATCH_CONC=1 E2E_STAGES="serve onebatch roofline" \
  PROFILE_MODELS=none MIN_PROMPTS=8 PROFILE_RESERVE_S=5 E2E_POINT_MARGIN_S=20 SCRIPT_LIMIT_S=200 bash scripts/gpu_e2e.sh > $R/gpu_e2e_out.txt 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 ))s"; tail -4 $R/gpu_e2e_out.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
echo "total $(( $(date +%s) - T0 ))s"
