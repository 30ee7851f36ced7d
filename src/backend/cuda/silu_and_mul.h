// SiLU-and-mul (DeepSeek MLP / expert activation), the CUDA counterpart of ds::cpu::SiluAndMul:
// out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i], fp32 math. Writes `out` (fp32 or bf16)
// when non-null, and, when q is non-null, also its per-token-group FP8 quantisation (group
// 128, same rule as fp8_quant.h, computed from the fp32 value before any bf16 rounding).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/gemm.h"

namespace ds::cuda {

struct SiluAndMulParams {
  const float* gate_up; int64_t ld_in;  // [n, 2I]
  void* out; int64_t ld_out;            // [n, I] or nullptr
  DTypeOut out_type = DTypeOut::kBF16;
  uint8_t* q = nullptr; int64_t ldq = 0;  // [n, I] e4m3 or nullptr
  float* scales = nullptr;
  ScaleLayout scale_layout = ScaleLayout::kGroupMajor;
  int64_t n, inter;
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
  int64_t scale_ld = 0;  // kGroupMajor: elements between groups (0 = n)
};
void SiluAndMul(const SiluAndMulParams& p);

}  // namespace ds::cuda
