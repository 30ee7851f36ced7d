// wgmma_probe.h: the tensor pipe's rate for each wgmma form (see the header).
#include "backend/cuda/wgmma_probe.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/wgmma_ops.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using sm90::Desc;
using sm90::SmemAddr;
using sm90::WgCommit;
using sm90::WgFence;
using sm90::WgWait;

constexpr uint32_t kABytes = 64 * 128;  // a warpgroup's A: 64 rows x 128 bytes of K

template <bool kFp8, int kN, bool kRs>
__device__ __forceinline__ void Wg(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (kFp8) {
    if constexpr (kRs) sm90::WgmmaE4m3Rs(d, a, db, scale_d);
    else sm90::WgmmaE4m3(d, da, db, scale_d);
  } else {
    if constexpr (kRs) sm90::WgmmaBf16Rs(d, a, db, scale_d);
    else sm90::WgmmaBf16(d, da, db, scale_d);
  }
}

// Shared memory: warpgroup w's A at w x 8 KB, then B (kN rows x 128 bytes), zeros, 128-byte
// swizzle descriptors as the GEMMs use. Each group: four wgmmas over the 128 bytes of K (32 bytes
// a step); 8 groups committed before a wait, so the pipe always has work queued.
// Random finite operands (zeros would draw less power, so the clock would run higher than in a
// GEMM): e4m3 bytes with the low bit clear (never the NaN codes 0x7f / 0xff); bf16 values of
// magnitude [0.5, 2).
__device__ __forceinline__ uint32_t Mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

template <bool kFp8, int kN, bool kRs>
__global__ void __launch_bounds__(384, 1) WgmmaProbeKernel(int64_t groups, float* sink, unsigned long long* clock_out) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - SmemAddr(smem_raw));
  const int wgs = blockDim.x / 128, wg = threadIdx.x / 128;
  const uint32_t bytes = wgs * kABytes + kN * 128;
  const auto word = [](uint32_t i) {
    const uint32_t h = Mix(i * 0x9e3779b9u + 1u);
    return kFp8 ? h & 0xfefefefeu : (h & 0x80ff80ffu) | 0x3f003f00u;
  };
  for (uint32_t i = threadIdx.x * 4; i < bytes; i += blockDim.x * 4) *reinterpret_cast<uint32_t*>(smem + i) = word(i);
  sm90::FenceProxyAsync();
  __syncthreads();
  const uint32_t a_box = base + wg * kABytes, b_box = base + wgs * kABytes;
  const uint32_t a[4] = {word(threadIdx.x), word(threadIdx.x + 1024), word(threadIdx.x + 2048), word(threadIdx.x + 3072)};
  // The sums accumulate across every group (scale_d 1): with groups that restart them, ptxas drops
  // the groups whose results are overwritten unread (a first version measured ~8x the hardware).
  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = 0.f;
  const unsigned long long c0 = clock64();
  const uint64_t t0 = dev::GlobalTimerNs();
  for (int64_t g = 0; g < groups; g += 8) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      WgFence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) Wg<kFp8, kN, kRs>(d, a, Desc(a_box + ks * 32, 16, 1024), Desc(b_box + ks * 32, 16, 1024), 1);
      WgCommit();
    }
    WgWait<0>();
    sm90::FenceRegs(d);
  }
  const uint64_t t1 = dev::GlobalTimerNs();
  const unsigned long long c1 = clock64();
  if (blockIdx.x == 0 && threadIdx.x == 0 && clock_out != nullptr) {
    clock_out[0] = c1 - c0;
    clock_out[1] = t1 - t0;
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s += d[i];
  if (s == 12345.678f) sink[0] = s;  // (keeps the sums alive; practically never true)
}

// Shared memory: the operands, or 120 KB if more, so that one CTA fits a SM.
constexpr int kProbeMinSmem = 120 * 1024;

template <bool kFp8, int kN, bool kRs>
void Launch(const WgmmaProbeParams& p, int grid, float* sink) {
  const auto kernel = WgmmaProbeKernel<kFp8, kN, kRs>;
  const int smem = std::max(kProbeMinSmem, static_cast<int>(p.warpgroups * kABytes + kN * 128 + 1024));
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), smem);
  kernel<<<grid, 128 * p.warpgroups, smem, p.stream>>>(p.groups, sink, p.clock_out);
  DS_CUDA_CHECK_LAUNCH("WgmmaProbeKernel");
}

}  // namespace

double WgmmaProbeFlops(const WgmmaProbeParams& p) {
  const int grid = p.sms > 0 ? p.sms : CurrentDeviceProps().sms;
  return 2.0 * 64 * p.n * 128 / (p.fp8 ? 1 : 2) * static_cast<double>(p.groups) * p.warpgroups * grid;
}

void WgmmaProbe(const WgmmaProbeParams& p) {
  DS_CHECK(CurrentDeviceProps().sm90) << "WgmmaProbe: needs an sm_90 device";
  DS_CHECK(p.n == 64 || p.n == 128 || p.n == 256) << "WgmmaProbe: n " << p.n;
  DS_CHECK(!p.a_in_registers || p.n != 64) << "WgmmaProbe: the RS form is probed at n 128 and 256";
  DS_CHECK(p.warpgroups >= 1 && p.warpgroups <= 3) << "WgmmaProbe: warpgroups " << p.warpgroups;
  DS_CHECK(p.groups > 0 && p.groups % 8 == 0) << "WgmmaProbe: groups " << p.groups << " (a multiple of 8)";
  DS_CHECK(p.sink != nullptr) << "WgmmaProbe: sink is null";
  DS_CHECK(p.sms >= 0 && p.sms <= CurrentDeviceProps().sms) << "WgmmaProbe: sms " << p.sms;
  float* const sink = p.sink;
  const int grid = p.sms > 0 ? p.sms : CurrentDeviceProps().sms;
  const auto pick = [&](auto fp8) {
    constexpr bool kF = decltype(fp8)::value;
    if (p.a_in_registers) {
      if (p.n == 128) Launch<kF, 128, true>(p, grid, sink);
      else Launch<kF, 256, true>(p, grid, sink);
    } else {
      if (p.n == 64) Launch<kF, 64, false>(p, grid, sink);
      else if (p.n == 128) Launch<kF, 128, false>(p, grid, sink);
      else Launch<kF, 256, false>(p, grid, sink);
    }
  };
  if (p.fp8) pick(std::true_type{});
  else pick(std::false_type{});
}

}  // namespace ds::cuda
