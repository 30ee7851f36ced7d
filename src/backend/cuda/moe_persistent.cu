#include "backend/cuda/moe_persistent.h"

#include <algorithm>
#include <sstream>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/moe_routing.cuh"
#include "backend/cuda/router_gemv.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = router::kThreads, kWarps = kThreads / 32;
static_assert(kThreads == routing::kMoeRoutingThreads, "one block size for the router GEMV and the routing");
constexpr int kMaxTopK = 16;
// 16-byte weight vectors a lane keeps in flight per row and pass (two rows per pass: 256 bytes a
// lane, 64 KB a block in flight).
constexpr int kVec = 8;

// Streams weights (read once: no L1 allocation; the kernel never writes them).
__device__ __forceinline__ uint4 LdStream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ float Lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float Hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// acc + the dot product of 8 bf16 weights with 8 bf16 activations, in element order.
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x, float acc) {
  acc = fmaf(Lo(w.x), Lo(x.x), acc); acc = fmaf(Hi(w.x), Hi(x.x), acc);
  acc = fmaf(Lo(w.y), Lo(x.y), acc); acc = fmaf(Hi(w.y), Hi(x.y), acc);
  acc = fmaf(Lo(w.z), Lo(x.z), acc); acc = fmaf(Hi(w.z), Hi(x.z), acc);
  acc = fmaf(Lo(w.w), Lo(x.w), acc); acc = fmaf(Hi(w.w), Hi(x.w), acc);
  return acc;
}

// One warp: d.x = w0 . x0 and d.y = w1 . x1 (w1 == nullptr: d.y = 0) over k8 16-byte vectors
// (8 bf16 each); weights from global memory, activations from shared memory. Lane l sums the
// vectors l, l + 32, ... in order, then a butterfly; every lane returns the sums.
__device__ __forceinline__ float2 WarpDot2(const bf16* w0, const bf16* x0, const bf16* w1, const bf16* x1, int k8) {
  const int lane = threadIdx.x & 31;
  const uint4* a = reinterpret_cast<const uint4*>(w0);
  const uint4* b = reinterpret_cast<const uint4*>(w1);
  const uint4* xa = reinterpret_cast<const uint4*>(x0);
  const uint4* xb = reinterpret_cast<const uint4*>(x1);
  float s0 = 0.f, s1 = 0.f;
  for (int base = lane; base < k8; base += 32 * kVec) {
    uint4 va[kVec], vb[kVec];
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int i = base + 32 * u;
      if (i < k8) {
        va[u] = LdStream(a + i);
        if (b) vb[u] = LdStream(b + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int i = base + 32 * u;
      if (i < k8) {
        s0 = Dot8(va[u], xa[i], s0);
        if (b) s1 = Dot8(vb[u], xb[i], s1);
      }
    }
  }
  return make_float2(dev::WarpSum(s0), dev::WarpSum(s1));
}

__device__ __forceinline__ uint32_t LdAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Grid-wide barrier over all blocks of a cooperative launch: sync[0] counts the arrivals, sync[1]
// is the generation. Each block reads the generation before it arrives (it cannot change before
// every block has arrived); the last to arrive resets the count and bumps the generation, the
// others wait for the bump. The fences around it release this block's stores and acquire the
// others' (the same pattern as moe_router_route.cu's last-block counter).
__device__ __forceinline__ void GridBarrier(uint32_t* sync) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t gen = LdAcquire(sync + 1);
    __threadfence();
    if (atomicAdd(sync, 1u) == gridDim.x - 1) {
      atomicExch(sync, 0u);
      __threadfence();
      atomicAdd(sync + 1, 1u);
    } else {
      while (LdAcquire(sync + 1) == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ __forceinline__ bf16 SiluMul(float g, float u) { return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u); }

// Copies n8 16-byte vectors from global (through L2: written by other blocks of this grid) to
// shared memory, by the whole block.
__device__ __forceinline__ void CopyToSmem(uint4* dst, const uint4* src, int64_t n8) {
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) dst[i] = __ldcg(src + i);
}

// kMinBlocks blocks per SM (the register cap that lets them fit: 2 -> <= 128 registers).
template <int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) MoePersistentKernel(MoePersistentParams p) {
  extern __shared__ uint4 smem4[];
  bf16* xs = reinterpret_cast<bf16*>(smem4);  // phases 1-2: x16 [hidden]; phase 3: act [top_k I + Is]
  __shared__ routing::WarpRouteScratch route_ws;
  __shared__ int32_t s_ids[kMaxTopK];
  __shared__ float s_w[kMaxTopK];
  __shared__ float s_vals[kWarps][kMoePersistentMaxColsPerWarp];
  __shared__ float s_ss[kWarps];
  __shared__ float s_total;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t Hd = p.hidden, E = p.num_experts, K = p.top_k, I = p.inter, Is = p.shared_inter;
  const int gw = blockIdx.x * kWarps + warp, W = gridDim.x * kWarps;
  const int hk8 = static_cast<int>(Hd / 8);
  const bool work = !p.barriers_only;
  const auto stamp = [&](int i) {
    if (p.stamps && threadIdx.x == 0) p.stamps[blockIdx.x * kMoePersistentStamps + i] = clock64();
  };
  stamp(0);

  // x16 -> shared memory (written by the previous kernel: plain loads are coherent here).
  for (int i = threadIdx.x; i < hk8; i += kThreads) smem4[i] = reinterpret_cast<const uint4*>(p.x16)[i];
  __syncthreads();

  // Phase 1: router logit columns; the shared experts' gate_up + SiLU.
  {
    RouterGemvParams gp{};
    gp.x = p.x32; gp.ldx = Hd; gp.w = p.router_w; gp.ldw = Hd; gp.y = p.logits; gp.ldy = E;
    gp.M = 1; gp.N = E; gp.K = Hd;
    for (int64_t n = blockIdx.x; work && n < E; n += gridDim.x) {
      router::GemvColumn(gp, n);
      __syncthreads();  // GemvColumn's partial sums are reused by the next column
    }
  }
  bf16* act = p.act;
  bf16* act_shared = act + K * I;
  for (int64_t c = gw; work && c < Is; c += W) {
    const float2 d = WarpDot2(p.shared_gu + c * Hd, xs, p.shared_gu + (Is + c) * Hd, xs, hk8);
    if (lane == 0) act_shared[c] = SiluMul(d.x, d.y);
  }
  stamp(1);
  GridBarrier(p.sync);
  stamp(2);

  // Phase 2: routing (every block, the same bits), then the routed gate_up + SiLU pairs.
  {
    MoeRoutingParams rp = p.routing;
    rp.logits = p.logits;
    rp.n = 1;
    rp.topk_ids = s_ids;
    rp.topk_weights = s_w;
    if (warp == 0 && work) routing::RouteTokenInWarp(rp, 0, route_ws.View());
    if (!work && threadIdx.x < K) { s_ids[threadIdx.x] = static_cast<int32_t>(threadIdx.x); s_w[threadIdx.x] = 0.f; }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x < K) {
      p.topk_ids[threadIdx.x] = s_ids[threadIdx.x];
      p.topk_weights[threadIdx.x] = s_w[threadIdx.x];
    }
  }
  for (int64_t q = gw; work && q < K * I; q += W) {
    const int64_t j = q / I, c = q % I;
    const bf16* we = p.w13 + static_cast<int64_t>(s_ids[j]) * 2 * I * Hd;
    const float2 d = WarpDot2(we + c * Hd, xs, we + (I + c) * Hd, xs, hk8);
    if (lane == 0) act[q] = SiluMul(d.x, d.y);
  }
  stamp(3);
  GridBarrier(p.sync);
  stamp(4);

  // Phase 3: act -> shared memory; the down projections by output column, the combine and the
  // residual add.
  if (work) CopyToSmem(smem4, reinterpret_cast<const uint4*>(act), (K * I + Is) / 8);
  __syncthreads();
  const int ik8 = static_cast<int>(I / 8), sk16 = static_cast<int>(Is / 16);
  const bf16* xa = xs;            // act_j at xa + j I
  const bf16* xsh = xs + K * I;   // act_shared
  float ss = 0.f;
  int cols = 0;
  for (int64_t n = gw; work && n < Hd; n += W, ++cols) {
    float acc = 0.f;
    if (Is > 0) {
      // The shared experts' down row in two halves (more loads in flight), fp32.
      const bf16* ws = p.shared_down + n * Is;
      const float2 d = WarpDot2(ws, xsh, ws + Is / 2, xsh + Is / 2, sk16);
      acc = d.x + d.y;
    }
    // The routed rows, two slots per pass; y_j rounded to bf16 as the unfused path stores it.
    float y[kMaxTopK];
#pragma unroll
    for (int j = 0; j < kMaxTopK; j += 2) {
      if (j >= K) break;
      const bf16* w0 = p.w2 + (static_cast<int64_t>(s_ids[j]) * Hd + n) * I;
      const bf16* w1 = j + 1 < K ? p.w2 + (static_cast<int64_t>(s_ids[j + 1]) * Hd + n) * I : nullptr;
      const float2 d = WarpDot2(w0, xa + j * I, w1, xa + (j + 1) * I, ik8);
      y[j] = d.x;
      if (j + 1 < kMaxTopK) y[j + 1] = d.y;
    }
#pragma unroll
    for (int j = 0; j < kMaxTopK; ++j) {
      if (j >= K) break;
      acc += s_w[j] * __bfloat162float(__float2bfloat16_rn(y[j]));
    }
    if (lane == 0) {
      const float v = acc + p.residual[n];
      p.residual[n] = v;
      s_vals[warp][cols] = v;
      ss += v * v;
    }
  }
  if (lane == 0) s_ss[warp] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.f;
    for (int w = 0; w < kWarps; ++w) b += s_ss[w];
    p.partials[blockIdx.x] = b;
  }
  stamp(5);
  GridBarrier(p.sync);
  stamp(6);

  // Phase 4: the next RMSNorm of the columns this block finished.
  if (warp == 0) {
    float t = 0.f;
    for (int b = lane; b < static_cast<int>(gridDim.x); b += 32) t += __ldcg(p.partials + b);
    t = dev::WarpSum(t);
    if (lane == 0) s_total = t;
  }
  __syncthreads();
  const float inv = rsqrtf(s_total / static_cast<float>(Hd) + p.eps);
  if (lane == 0 && work) {
    int k = 0;
    for (int64_t n = gw; n < Hd; n += W, ++k) {
      const float o = s_vals[warp][k] * inv * p.norm_weight[n];
      p.out32[n] = o;
      if (p.out16) p.out16[n] = __float2bfloat16_rn(o);
    }
  }
  stamp(7);
}

size_t SmemBytes(const MoePersistentParams& p) {
  return sizeof(bf16) * static_cast<size_t>(std::max(p.hidden, p.top_k * p.inter + p.shared_inter));
}

}  // namespace

int MoePersistentGridBlocks(int blocks_per_sm) { return CurrentDeviceProps().sms * blocks_per_sm; }

std::string MoePersistentUnsupported(const MoePersistentParams& p) {
  std::ostringstream why;
  const int64_t W = int64_t{MoePersistentGridBlocks(std::clamp(p.blocks_per_sm, 1, 2))} * kWarps;
  if (p.blocks_per_sm < 1 || p.blocks_per_sm > 2) why << "blocks_per_sm " << p.blocks_per_sm << " (1 or 2); ";
  const MoeRoutingParams& r = p.routing;
  if (p.hidden < 8 || p.hidden % 8 != 0) why << "hidden " << p.hidden << " is not a positive multiple of 8; ";
  if (p.inter < 8 || p.inter % 8 != 0) why << "moe_intermediate_size " << p.inter << " is not a positive multiple of 8; ";
  if (p.shared_inter < 0 || p.shared_inter % 16 != 0)
    why << "shared intermediate size " << p.shared_inter << " is not a multiple of 16; ";
  if ((p.shared_inter > 0) != (p.shared_gu != nullptr && p.shared_down != nullptr))
    why << "shared experts' weights and size disagree; ";
  if (p.num_experts < 1 || p.num_experts > routing::kWarpRouteMaxExperts)
    why << "num_experts " << p.num_experts << " (1.." << routing::kWarpRouteMaxExperts << "); ";
  if (p.top_k < 1 || p.top_k > kMaxTopK || p.top_k > p.num_experts) why << "top_k " << p.top_k << "; ";
  if (r.num_experts != p.num_experts || r.top_k != p.top_k) why << "routing's E / top_k differ; ";
  if (r.n_group < 1 || r.n_group > 64 || p.num_experts % std::max(r.n_group, 1) != 0 || r.topk_group < 1 ||
      r.topk_group > r.n_group)
    why << "n_group " << r.n_group << " / topk_group " << r.topk_group << "; ";
  if (p.hidden > W * kMoePersistentMaxColsPerWarp) why << "hidden " << p.hidden << " over the norm's columns per warp; ";
  if (SmemBytes(p) > 200 * 1024) why << "activations need " << SmemBytes(p) << " bytes of shared memory; ";
  if (!p.x32 || !p.x16 || !p.router_w || !p.w13 || !p.w2 || !p.logits || !p.topk_ids || !p.topk_weights || !p.act ||
      !p.residual || !p.norm_weight || !p.out32 || !p.sync || !p.partials)
    why << "null pointer; ";
  const auto misaligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; };
  if (misaligned(p.x32) || misaligned(p.x16) || misaligned(p.router_w) || misaligned(p.w13) || misaligned(p.w2) ||
      misaligned(p.act) || (p.shared_gu && (misaligned(p.shared_gu) || misaligned(p.shared_down))))
    why << "operands must be 16-byte aligned; ";
  return why.str();
}

void MoePersistent(const MoePersistentParams& p) {
  const std::string why = MoePersistentUnsupported(p);
  DS_CHECK(why.empty()) << "MoePersistent: " << why;
  const size_t smem = SmemBytes(p);
  const bool two = p.blocks_per_sm == 2;
  void (*kernel)(MoePersistentParams) = two ? MoePersistentKernel<2> : MoePersistentKernel<1>;
  static int checked_smem[2] = {-1, -1};  // the largest dynamic shared memory already allowed, per variant
  if (static_cast<int>(smem) > checked_smem[two]) {
    if (smem > 48 * 1024) EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    int per_sm = 0;
    DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    DS_CHECK(per_sm >= p.blocks_per_sm) << "MoePersistent: " << p.blocks_per_sm << " blocks with " << smem
                                        << " bytes of shared memory do not fit an SM (" << per_sm << ")";
    checked_smem[two] = static_cast<int>(smem);
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(MoePersistentGridBlocks(p.blocks_per_sm)));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = p.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident: the grid barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

}  // namespace ds::cuda
