// The tensor pipe's own rate for each wgmma form our sm_90a kernels use, measured with nothing
// else running: every SM runs one CTA of `warpgroups` warpgroups, each issuing back-to-back groups
// of four wgmma m64nNkK (128 bytes of K a group: k32 x 4 for e4m3, k16 x 4 for bf16) on random
// finite operands that stay in shared memory (A from registers with `a_in_registers`), 8 groups
// in flight before each wait (a drain every 32 wgmmas, which a single warpgroup cannot hide).
// It is the ceiling a GEMM or attention kernel built on that form can reach (the tensor-core
// figure beside a kernel's TFLOP/s in `dsinfer bench kernels --only wgmma_probe`). PTX ISA 8.x,
// "wgmma.mma_async". Errors: CheckError (unsupported form, no sm_90 device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct WgmmaProbeParams {
  bool fp8 = true;              // e4m3 x e4m3 (k32), else bf16 x bf16 (k16)
  int n = 128;                  // 64, 128 or 256 (the wgmma N, columns of the accumulator)
  bool a_in_registers = false;  // RS form (n 128 or 256), else SS
  int warpgroups = 2;           // 1 to 3 per SM
  int64_t groups = 4096;        // groups of four wgmmas per warpgroup, a multiple of 8
  int sms = 0;                  // CTAs (one per SM); 0: every SM
  float* sink = nullptr;        // one float of device memory (keeps the sums alive; not meaningful)
  unsigned long long* clock_out = nullptr;  // optional, 2 values: CTA 0's SM cycles and ns in the loop
  cudaStream_t stream = nullptr;
};

// FLOPs one launch performs: 2 x 64 x n x (128 bytes of K) x groups x warpgroups x CTAs.
double WgmmaProbeFlops(const WgmmaProbeParams& p);
void WgmmaProbe(const WgmmaProbeParams& p);

}  // namespace ds::cuda
