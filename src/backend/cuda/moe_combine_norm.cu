#include "backend/cuda/moe_combine_norm.h"

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_props.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rmsnorm.cuh"

namespace ds::cuda {
namespace {

// The staged forms (PE > 0: rows of at most PE elements per thread; decode rows are one block
// each and latency-bound) hold a thread's PE elements in registers and up to kStagedTopK routed
// slots per token in shared memory, and issue every load of one accumulation step before its
// adds: the base, shared rows and residual up front, then the routed rows kSlotLoads / PE slots
// at a time (a V2-Lite token's 6 slots of 2 elements per thread in one round trip, where the
// loop form chains a pos -> row load pair per slot and element). PE = 0 is the loop form (wider
// rows, or more slots). All forms run the same fp32 operations in the same order per element
// (header), so they give the same bits.
constexpr int kStagedTopK = 16;
constexpr int kSlotLoads = 16;  // routed-row loads in flight per thread (rows of <= 4 per thread)
constexpr int kMaxThreads = 1024;  // RmsNormThreads' largest block: at most 64 registers a thread

// The loop form (rows of more than 8 elements per thread, or more than kStagedTopK slots).
template <typename T>
__device__ __forceinline__ void MoeCombineNormLoop(const MoeCombineNormParams& p, int64_t t, const T* y,
                                                   const float* fy, float* res, float* red) {
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    // MoeCombine (moe_permute.cu CombineKernel), with the shared groups first.
    float acc = p.base ? p.base[t * p.ld_base + i] : 0.f;
    for (int s = 0; s < p.num_shared; ++s) acc += fy[(p.shared_row0 + s * p.n + t) * p.ldy + i];
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t r = p.pos[t * p.top_k + j];
      if (r < 0) continue;
      float yv = dev::ToF(y[static_cast<int64_t>(r) * p.ldy + i]);
      if (p.round_y_bf16) yv = __bfloat162float(__float2bfloat16_rn(yv));
      acc += p.weights[t * p.top_k + j] * yv;
    }
    if (p.moe_out) p.moe_out[t * p.ld_moe_out + i] = acc;
    // RmsNorm (rmsnorm.cu) with x = acc and the residual.
    if (res) {
      float v = acc;
      v += res[i];
      res[i] = v;
      ss += v * v;
    }
  }
  if (!res) return;
  const float total = dev::BlockSum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
  for (int64_t i = threadIdx.x; i < p.d; i += blockDim.x) {
    const float o = res[i] * inv * p.norm_weight[i];
    p.out[t * p.ldout + i] = o;
    if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
  }
}

// A thread's PE elements (element e at index idx(e) of the row), acc holding the base (or 0): the
// fused shared groups' rows, then the routed slots in slot order, kSc slots' loads in flight at a
// time (every load of a batch before its adds). The staged forms' per-element operations.
template <typename T, int PE, int kSc, class Idx>
__device__ __forceinline__ void AddExpertRows(const MoeCombineNormParams& p, int64_t t, const T* y, const float* fy,
                                              const int32_t* s_pos, const float* s_w, Idx idx, float (&acc)[PE]) {
  for (int s = 0; s < p.num_shared; ++s) {
    const float* row = fy + (p.shared_row0 + s * p.n + t) * p.ldy;
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = idx(e);
      if (i < p.d) acc[e] += row[i];
    }
  }
  for (int64_t j0 = 0; j0 < p.top_k; j0 += kSc) {
    float yv[kSc][PE];
#pragma unroll
    for (int jj = 0; jj < kSc; ++jj) {
      const int64_t j = j0 + jj;
      const int32_t r = j < p.top_k ? s_pos[j] : -1;
      const T* row = y + static_cast<int64_t>(r < 0 ? 0 : r) * p.ldy;
#pragma unroll
      for (int e = 0; e < PE; ++e) {
        const int64_t i = idx(e);
        yv[jj][e] = r >= 0 && i < p.d ? dev::ToF(row[i]) : 0.f;
      }
    }
#pragma unroll
    for (int jj = 0; jj < kSc; ++jj) {
      const int64_t j = j0 + jj;
      if (j >= p.top_k || s_pos[j] < 0) continue;
      const float w = s_w[j];
#pragma unroll
      for (int e = 0; e < PE; ++e) {
        float v = yv[jj][e];
        if (p.round_y_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
        acc[e] += w * v;
      }
    }
  }
}

template <typename T, int PE>
__global__ void __launch_bounds__(kMaxThreads) MoeCombineNormKernel(MoeCombineNormParams p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  __shared__ float red[32];
  __shared__ int32_t s_pos[kStagedTopK];
  __shared__ float s_w[kStagedTopK];
  const int64_t t = blockIdx.x;
  const T* y = static_cast<const T*>(p.y);
  const float* fy = static_cast<const float*>(p.y);
  float* res = p.residual ? p.residual + t * p.ldres : nullptr;
  float ss = 0.f;
  const int64_t bd = blockDim.x;
  if constexpr (PE > 0) {
    // Slots per batch of loads: rows of 8 per thread (V3) keep one slot per batch (16 loads in
    // flight do not fit 64 registers beside the accumulators); at most 8 slots a batch.
    constexpr int kSc = PE >= 8 ? 1 : (kSlotLoads / PE < 8 ? kSlotLoads / PE : 8);
    if (threadIdx.x < p.top_k) {
      s_pos[threadIdx.x] = p.pos[t * p.top_k + threadIdx.x];
      s_w[threadIdx.x] = p.weights[t * p.top_k + threadIdx.x];
    }
    float acc[PE], rv[PE];
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      acc[e] = p.base && i < p.d ? p.base[t * p.ld_base + i] : 0.f;
      rv[e] = res && i < p.d ? res[i] : 0.f;
    }
    __syncthreads();
    AddExpertRows<T, PE, kSc>(p, t, y, fy, s_pos, s_w, [&](int e) { return threadIdx.x + e * bd; }, acc);
    if (p.moe_out) {
#pragma unroll
      for (int e = 0; e < PE; ++e) {
        const int64_t i = threadIdx.x + e * bd;
        if (i < p.d) p.moe_out[t * p.ld_moe_out + i] = acc[e];
      }
    }
    if (!res) return;
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < p.d) {
        const float v = acc[e] + rv[e];
        res[i] = v;
        acc[e] = v;
        ss += v * v;
      }
    }
    const float total = dev::BlockSum(ss, red);
    const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = threadIdx.x + e * bd;
      if (i < p.d) {
        const float o = acc[e] * inv * p.norm_weight[i];
        p.out[t * p.ldout + i] = o;
        if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
      }
    }
    return;
  } else {
    MoeCombineNormLoop<T>(p, t, y, fy, res, red);
  }
}

// split_blocks (moe_combine_norm.h): token t = blockIdx.x / G, block g = blockIdx.x % G of it plays
// the one-block kernel's threads v = g * blockDim.x + threadIdx.x (VT = G * blockDim.x of them),
// thread v's elements i = v + e VT, e < PE, with the one-block staged form's operations in its
// order; every routed slot's loads in flight at once (kSc = 8 slots a batch: 64 loads at PE 8,
// at most 512 threads a block here). The sums of squares: each real warp is one of the one-block
// kernel's warps (the same lanes), so its WarpSum is that warp's; the VT / 32 warp sums go
// through split_ss, and after the grid barrier every block runs BlockSum's last step on them.
template <typename T, int PE>
__global__ void __launch_bounds__(256, 1) MoeCombineNormSplitKernel(MoeCombineNormParams p) {
  __shared__ int32_t s_pos[kStagedTopK];
  __shared__ float s_w[kStagedTopK];
  __shared__ uint64_t s_base;
  constexpr int kSc = 8;
  const int G = p.split_blocks;
  const int64_t t = blockIdx.x / G;
  const int64_t rt = blockDim.x, vt = rt * G, v = (blockIdx.x % G) * rt + threadIdx.x;
  const int lane = threadIdx.x & 31;
  const T* y = static_cast<const T*>(p.y);
  const float* fy = static_cast<const float*>(p.y);
  float* res = p.residual + t * p.ldres;
  if (threadIdx.x == 0) s_base = grid::GridBase(p.split_sync);  // before this block's arrival
  if (threadIdx.x < p.top_k) {
    s_pos[threadIdx.x] = p.pos[t * p.top_k + threadIdx.x];
    s_w[threadIdx.x] = p.weights[t * p.top_k + threadIdx.x];
  }
  float acc[PE], rv[PE], nw[PE];
#pragma unroll
  for (int e = 0; e < PE; ++e) {
    const int64_t i = v + e * vt;
    acc[e] = p.base && i < p.d ? p.base[t * p.ld_base + i] : 0.f;
    rv[e] = i < p.d ? res[i] : 0.f;
    nw[e] = i < p.d ? p.norm_weight[i] : 0.f;
  }
  __syncthreads();
  AddExpertRows<T, PE, kSc>(p, t, y, fy, s_pos, s_w, [&](int e) { return v + e * vt; }, acc);
  if (p.moe_out) {
#pragma unroll
    for (int e = 0; e < PE; ++e) {
      const int64_t i = v + e * vt;
      if (i < p.d) p.moe_out[t * p.ld_moe_out + i] = acc[e];
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < PE; ++e) {
    const int64_t i = v + e * vt;
    if (i < p.d) {
      const float x = acc[e] + rv[e];
      res[i] = x;
      acc[e] = x;
      ss += x * x;
    }
  }
  ss = dev::WarpSum(ss);  // this warp's (the one-block kernel's warp v / 32)
  if (lane == 0) p.split_ss[t * 32 + (v >> 5)] = ss;
  grid::GridBarrier(p.split_sync, s_base + gridDim.x, /*final=*/true);
  const int nw32 = static_cast<int>(vt >> 5);
  const float total = dev::WarpSum(lane < nw32 ? __ldcg(p.split_ss + t * 32 + lane) : 0.f);
  const float inv = rsqrtf(total / static_cast<float>(p.d) + p.eps);
#pragma unroll
  for (int e = 0; e < PE; ++e) {
    const int64_t i = v + e * vt;
    if (i < p.d) {
      const float o = acc[e] * inv * nw[e];
      p.out[t * p.ldout + i] = o;
      if (p.out_bf16) p.out_bf16[t * p.ldout_bf16 + i] = __float2bfloat16_rn(o);
    }
  }
}

// Blocks of `threads` threads of `kernel` the current device holds at once (the occupancy
// calculator, cached per device, kernel and block size): a cooperative grid must fit.
int ResidentBlocks(const void* kernel, int threads) {
  static std::mutex mu;
  static auto* cache = new std::map<std::tuple<int, const void*, int>, int>();
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(dev, kernel, threads);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  int per_sm = 0;
  DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int n = per_sm * CurrentDeviceProps().sms;
  (*cache)[key] = n;
  return n;
}

// Returns false (nothing launched) where the grid does not fit the device at once: the caller
// then runs the one-block kernel (the same bits).
template <typename T, int PE>
bool LaunchSplitPe(const MoeCombineNormParams& p, int block) {
  const auto kernel = MoeCombineNormSplitKernel<T, PE>;
  const int64_t grid = p.n * p.split_blocks;
  if (grid > ResidentBlocks(reinterpret_cast<const void*>(kernel), block)) return false;
  LaunchCooperative(kernel, dim3(static_cast<unsigned>(grid)), dim3(static_cast<unsigned>(block)), 0, p.stream, p);
  return true;
}

template <typename T>
bool LaunchSplit(int pe, int threads, const MoeCombineNormParams& p) {
  const int block = threads / p.split_blocks;
  switch (pe) {
    case 1: return LaunchSplitPe<T, 1>(p, block);
    case 2: return LaunchSplitPe<T, 2>(p, block);
    case 4: return LaunchSplitPe<T, 4>(p, block);
    default: return LaunchSplitPe<T, 8>(p, block);
  }
}

template <typename T>
void Launch(int pe, int threads, const MoeCombineNormParams& p) {
  switch (pe) {
    case 1: LaunchKernel(MoeCombineNormKernel<T, 1>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 2: LaunchKernel(MoeCombineNormKernel<T, 2>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 4: LaunchKernel(MoeCombineNormKernel<T, 4>, p.n, threads, 0, p.stream, p.pdl, p); break;
    case 8: LaunchKernel(MoeCombineNormKernel<T, 8>, p.n, threads, 0, p.stream, p.pdl, p); break;
    default: LaunchKernel(MoeCombineNormKernel<T, 0>, p.n, threads, 0, p.stream, p.pdl, p); break;
  }
}

}  // namespace

void MoeCombineNorm(const MoeCombineNormParams& p) {
  DS_CHECK(p.n >= 0 && p.d > 0 && p.top_k >= 0) << "MoeCombineNorm: bad shape n=" << p.n << " d=" << p.d;
  DS_CHECK(p.num_shared == 0 || !p.y_bf16) << "MoeCombineNorm: fused shared groups need fp32 y";
  DS_CHECK(!p.round_y_bf16 || !p.y_bf16) << "MoeCombineNorm: round_y_bf16 is for fp32 y";
  DS_CHECK(p.residual || p.moe_out) << "MoeCombineNorm: no output";
  DS_CHECK(!p.residual || (p.norm_weight && p.out)) << "MoeCombineNorm: the norm needs its weight and output";
  if (p.n == 0) return;
  const int threads = norm::RmsNormThreads(p.d);  // RmsNorm's block size (same reduction order)
  const int64_t per_thread = (p.d + threads - 1) / threads;
  const int pe = p.top_k > kStagedTopK ? 0 : per_thread <= 1 ? 1 : per_thread <= 2 ? 2 : per_thread <= 4 ? 4
                                                                   : per_thread <= 8 ? 8 : 0;
  if (p.split_blocks > 1) {
    const int G = p.split_blocks;
    DS_CHECK(p.residual != nullptr) << "MoeCombineNorm: split_blocks needs the residual form";
    DS_CHECK(pe > 0) << "MoeCombineNorm: split_blocks needs <= 8 elements a thread and <= " << kStagedTopK
                     << " slots (d " << p.d << ", top_k " << p.top_k << ")";
    DS_CHECK(threads % (32 * G) == 0 && threads / G <= 256)
        << "MoeCombineNorm: split_blocks " << G << " must divide " << threads / 32 << " warps into blocks of <= 256 threads";
    DS_CHECK(p.split_sync != nullptr && p.split_ss != nullptr) << "MoeCombineNorm: split_blocks needs split_sync and split_ss";
    DS_CHECK(reinterpret_cast<uintptr_t>(p.split_sync) % 8 == 0) << "MoeCombineNorm: split_sync must be 8-byte aligned";
    DS_CHECK(p.n * G < (int64_t{1} << 20)) << "MoeCombineNorm: " << p.n * G << " blocks (grid_barrier.cuh's epoch)";
    const bool split = p.y_bf16 ? LaunchSplit<__nv_bfloat16>(pe, threads, p) : LaunchSplit<float>(pe, threads, p);
    if (split) {
      DS_CUDA_CHECK_LAUNCH("MoeCombineNormSplitKernel");
      return;
    }
  }
  if (p.y_bf16) Launch<__nv_bfloat16>(pe, threads, p);
  else Launch<float>(pe, threads, p);
  DS_CUDA_CHECK_LAUNCH("MoeCombineNormKernel");
}

}  // namespace ds::cuda
