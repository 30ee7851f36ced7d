#include "backend/cuda/fp8_quant.h"

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

template <typename T>
__global__ void Fp8QuantKernel(Fp8QuantParams p, int64_t groups) {
  const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
  if (item >= p.n * groups) return;
  const int64_t t = item / groups, g = item % groups;
  const T* x = static_cast<const T*>(p.x) + t * p.ldx;
  const int64_t k0 = g * p.group, k1 = min(p.k, k0 + p.group);
  float amax = 0.f;
  for (int64_t i = k0 + lane; i < k1; i += 32) amax = fmaxf(amax, fabsf(dev::ToF(x[i])));
  amax = fmaxf(dev::WarpMax(amax), 1e-10f);
  const float scale = amax / 448.0f;
  uint8_t* q = p.q + t * p.ldq;
  for (int64_t i = k0 + lane; i < k1; i += 32) q[i] = dev::F32ToE4M3(dev::ToF(x[i]) / scale);
  if (lane == 0) {
    if (p.layout == ScaleLayout::kTokenMajor) p.scales[t * groups + g] = scale;
    else p.scales[g * (p.scale_ld > 0 ? p.scale_ld : p.n) + t] = scale;
  }
}

__device__ __forceinline__ void SplitStore(float v, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t at) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  hi[at] = h;
  if (lo) lo[at] = __float2bfloat16_rn(v - __bfloat162float(h));
}

__global__ void Fp8DequantKernel(Fp8QuantParams p, int64_t groups, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.n * p.k) return;
  const int64_t t = i / p.k, c = i % p.k, g = c / p.group;
  const float scale = p.layout == ScaleLayout::kTokenMajor ? p.scales[t * groups + g]
                                                           : p.scales[g * (p.scale_ld > 0 ? p.scale_ld : p.n) + t];
  SplitStore(dev::E4M3ToF32(p.q[t * p.ldq + c]) * scale, hi, lo, t * ldo + c);
}

__global__ void Fp8BlockDequantSplitKernel(const uint8_t* q, const float* scales, int64_t N, int64_t K,
                                           __nv_bfloat16* hi, __nv_bfloat16* lo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * K) return;
  const int64_t n = i / K, k = i % K, kb = (K + 127) / 128;
  SplitStore(dev::E4M3ToF32(q[i]) * scales[(n / 128) * kb + k / 128], hi, lo, i);
}

}  // namespace

void Fp8DequantizePerTokenGroupToBf16(const Fp8QuantParams& p, void* hi, void* lo, int64_t ldo) {
  if (p.n == 0) return;
  const int64_t groups = (p.k + p.group - 1) / p.group;
  const int64_t total = p.n * p.k;
  Fp8DequantKernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, p.stream>>>(
      p, groups, static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo), ldo);
  DS_CUDA_CHECK_LAUNCH("Fp8DequantKernel");
}

void DequantFp8BlocksToBf16Split(const uint8_t* q, const float* scales, int64_t N, int64_t K, void* hi, void* lo,
                                 cudaStream_t stream) {
  if (N * K == 0) return;
  Fp8BlockDequantSplitKernel<<<static_cast<unsigned>((N * K + 255) / 256), 256, 0, stream>>>(
      q, scales, N, K, static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo));
  DS_CUDA_CHECK_LAUNCH("Fp8BlockDequantSplitKernel");
}

void Fp8QuantizePerTokenGroup(const Fp8QuantParams& p) {
  DS_CHECK(p.group >= 32 && p.group % 32 == 0 && p.group <= 1024)
      << "Fp8QuantizePerTokenGroup: group must be a multiple of 32 in [32, 1024], got " << p.group;
  DS_CHECK(p.n >= 0 && p.k > 0) << "Fp8QuantizePerTokenGroup: bad shape";
  if (p.n == 0) return;
  const int64_t groups = (p.k + p.group - 1) / p.group;
  const int warps = 8;
  const int blocks = dev::CeilDiv(p.n * groups, warps);
  if (p.x_bf16) Fp8QuantKernel<__nv_bfloat16><<<blocks, warps * 32, 0, p.stream>>>(p, groups);
  else Fp8QuantKernel<float><<<blocks, warps * 32, 0, p.stream>>>(p, groups);
  DS_CUDA_CHECK_LAUNCH("Fp8QuantKernel");
}

}  // namespace ds::cuda
