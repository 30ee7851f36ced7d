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

# NCU_NAME_BASE (default function) is what KERNEL_REGEX matches: function (the bare name), or mangled
# to pick one template instantiation (e.g. Fp8GemmPanelKernelILi3ELb1 = Fp8GemmPanelKernel<3, true>).
# ncu_sections KERNEL_REGEX TAG -- BENCH_ARGS...: one launch of the kernel (after NCU_SKIP, default
# 3) under the report sections, while `dsinfer bench kernels BENCH_ARGS` runs; $OUTDIR/ncu_TAG.txt.
ncu_sections() {
  local kernel=$1 tag=$2; shift 3
  timeout ${NCU_TIMEOUT_S:-150} $NCU --clock-control none --kernel-name-base ${NCU_NAME_BASE:-function} \
    --kernel-name "regex:$kernel" --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes $SECTIONS \
    $B/dsinfer bench kernels "$@" --out /tmp/ncu_kk > "$OUTDIR/ncu_$tag.txt" 2>&1
}
# ncu_source KERNEL_REGEX TAG -- BENCH_ARGS...: per-instruction stall samples (SourceCounters) of
# the same launch, exported from a saved report as the source page (SASS) and summarised by
# bench/ncu_source_top.py into $OUTDIR/ncu_TAG_source_top.txt (the 40 instructions with the most
# samples, with their stall reasons); the csv stays in /tmp/ncu_src_TAG.csv.
ncu_source() {
  local kernel=$1 tag=$2; shift 3
  rm -f /tmp/ncu_src_$tag.ncu-rep
  timeout ${NCU_TIMEOUT_S:-150} $NCU --clock-control none --kernel-name-base ${NCU_NAME_BASE:-function} \
    --kernel-name "regex:$kernel" --launch-skip ${NCU_SKIP:-3} --launch-count 1 --kill yes --section SourceCounters --section WarpStateStats \
    --import-source yes -o /tmp/ncu_src_$tag $B/dsinfer bench kernels "$@" --out /tmp/ncu_kk > /tmp/ncu_src_$tag.log 2>&1
  $NCU --import /tmp/ncu_src_$tag.ncu-rep --page source --csv --print-source sass > /tmp/ncu_src_$tag.csv 2>&1
  python3 bench/ncu_source_top.py /tmp/ncu_src_$tag.csv 40 > "$OUTDIR/ncu_${tag}_source_top.txt" 2>&1
}
