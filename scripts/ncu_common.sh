# Sourced by the Nsight Compute scripts (ncu_mla_sm90.sh, ncu_fp8_wgmma.sh) on the GPU machine,
# from the checkout with .carry packed by scripts/gpu_carry.sh: unpacks the binaries into
# /tmp/dsinfer_ncu, sets B (their folder) and LD_LIBRARY_PATH, finds NCU, sets SECTIONS (the
# default report sections plus NCU_EXTRA_SECTIONS) and OUTDIR ($OUT or /tmp).
W=/tmp/dsinfer_ncu
mkdir -p $W && xz -dc .carry/bin.tar.xz | tar -C $W -xf - || { echo "no .carry/bin.tar.xz"; exit 1; }
B=$W/bin
CUBLAS_PY=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${CUBLAS_PY}:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section InstructionStats ${NCU_EXTRA_SECTIONS:-}"
OUTDIR=${OUT:-/tmp}
