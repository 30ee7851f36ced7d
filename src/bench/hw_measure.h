// Measured machine rates for the roofline (CPU backend). The CUDA rates are measured by the
// CUDA backend (or given with --mem-bw-gbps / --flops-tflops).
#pragma once

namespace ds::bench {

// Read bandwidth in GB/s: the best of `reps` passes summing a `mbytes` MB fp32 buffer with
// the OpenMP threads the CPU ops use.
double MeasureCpuReadBandwidthGBps(int mbytes = 256, int reps = 5);
// fp32 GEMM rate (cblas_sgemm, n x n x n) in TFLOP/s, best of `reps`.
double MeasureCpuSgemmTflops(int n = 1024, int reps = 3);

}  // namespace ds::bench
