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

// The inverse, for emulating the quantised path on bf16 GEMMs: v[t, i] = e4m3(q[t, i]) *
// scale(t, i / group) (fp32), written as hi = bf16(v) and, when lo != nullptr,
// lo = bf16(v - hi) (hi + lo = v to ~2^-17 relative). Scales in p.layout / p.scale_ld as
// written by Fp8QuantizePerTokenGroup; p.x is unused; hi / lo are [n, k] with leading
// dimension ldo.
void Fp8DequantizePerTokenGroupToBf16(const Fp8QuantParams& p, void* hi, void* lo, int64_t ldo);

// Weights: v[n, k] = e4m3(q[n, k]) * scales[n / 128, k / 128] (checkpoint layout
// [ceil(N/128), ceil(K/128)]), written as hi = bf16(v), lo = bf16(v - hi), [N, K] each.
void DequantFp8BlocksToBf16Split(const uint8_t* q, const float* scales, int64_t N, int64_t K, void* hi, void* lo,
                                 cudaStream_t stream);

}  // namespace ds::cuda
