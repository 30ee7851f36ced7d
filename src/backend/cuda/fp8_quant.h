// Per-token-group dynamic FP8 (e4m3) quantisation, the CUDA counterpart of
// ds::cpu::Fp8QuantizePerTokenGroup (DeepSeek-V3 inference/kernel.py act_quant):
// for each token and each group of `group` channels, amax = max(max|x|, 1e-10),
// scale = amax / 448, q = e4m3_rn_sat(x / scale).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// Where scale (token t, group g) lives: kTokenMajor: scales[t * groups + g] (the CPU op's
// layout); kGroupMajor: scales[g * n + t] (cuBLASLt VEC128 layout, gemm.h).
enum class ScaleLayout { kTokenMajor, kGroupMajor };

struct Fp8QuantParams {
  const void* x; bool x_bf16 = false; int64_t ldx;  // [n, k] fp32 or bf16
  int64_t n, k;
  int64_t group = 128;                               // a multiple of 32, <= 1024
  uint8_t* q; int64_t ldq;                           // [n, k] e4m3
  float* scales;                                     // [n, ceil(k/group)] or transposed
  ScaleLayout layout = ScaleLayout::kTokenMajor;
  cudaStream_t stream = nullptr;
  int64_t scale_ld = 0;  // kGroupMajor: elements between groups (0 = n; GemmFp8 wants round_up(n, 16))
};
void Fp8QuantizePerTokenGroup(const Fp8QuantParams& p);

// The inverse, for emulating the quantised path on a bf16 GEMM: out[t, i] =
// bf16(e4m3(q[t, i]) * scale(t, i / group)) (the e4m3 x fp32 product rounded once to bf16,
// <= 2^-9 relative), scales in p.layout / p.scale_ld as written by Fp8QuantizePerTokenGroup.
// p.x is unused; out is [n, k] with leading dimension ldo.
void Fp8DequantizePerTokenGroupToBf16(const Fp8QuantParams& p, void* out_bf16, int64_t ldo);

}  // namespace ds::cuda
