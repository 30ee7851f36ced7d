#!/usr/bin/env bash
# The TMA-ring design's first probe on the GPU machine, in one device call (carry [".carry"] packed by
# scripts/gpu_carry.sh; run from the checkout's root): CudaStreamRing.DISABLED_RingReport
# (tests/cuda/test_stream_ring.cu; docs/design/decode_small_batch.md, "Next: the MoE layer on a TMA
# ring") under a timeout (a ring that never fills would hang), then the register-burst reference
# (CudaStreamPattern.DISABLED_StartReport) and the MoE kernel's own timing report, for comparison.
# Output in $OUT/ring: ring.log, start.log, moe_timing.log and the [metric] lines printed.
set -uo pipefail
R=${OUT:-/tmp/ring_out}/ring
. scripts/gpu_call_setup.sh
run() {  # name filter timeout
  (cd /tmp && timeout "$3" "$B/dsinfer_cuda_tests" --gtest_also_run_disabled_tests --gtest_filter="$2") > "$R/$1.log" 2>&1
  echo "$1 rc=$?"
  grep -E "\[metric\]" "$R/$1.log" | cut -c1-220 | head -40
}
run ring 'CudaStreamRing.DISABLED_RingReport' "${RING_TIMEOUT_S:-120}"
run start 'CudaStreamPattern.DISABLED_StartReport' "${START_TIMEOUT_S:-120}"
run moe_timing 'CudaMoePersistent.DISABLED_V2LiteTimingReport' 90
