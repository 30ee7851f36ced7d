// stream_probe: DRAM read rate of the weight-streaming access patterns the batch-1 decode
// kernels use (moe_persistent.cu, mla_attn_persistent.cu), against sequential reads, on one GPU.
// A measurement tool for docs/design/decode_small_batch.md ("Session 24"), not part of the
// engine: it times each pattern over fresh (not L2-resident) memory.
//
// A "tile" is 16 weight rows of 4,096 bytes (V2-Lite's hidden 2,048 in bf16) = 64 KB; a launch
// streams `tiles` of them (1,408 tiles = 92 MB, the V2-Lite MoE gate_up phase at batch 1), tile t
// on block t % grid, each lane keeping 16 loads of 16 bytes in flight per tile:
//   pattern 0 "tile16":  ptx::WarpTile16Cols' lanes: warp w takes bytes [512 w, 512 w + 512) of
//                        every row; lane 4 g + q reads rows g and g + 8 at 64 s + 16 q (s < 8):
//                        a load instruction touches 16 B x 4 lanes of 8 rows;
//   pattern 1 "rows":    warp w reads rows 2w and 2w + 1 whole: a load instruction is 512
//                        contiguous bytes;
//   pattern 2 "block":   thread t reads 16 B at 16 t of each of the 16 rows (the block's 4 KB
//                        row by row);
//   pattern 3 "bulk":    warp w's lane 0 bulk-copies rows 2w and 2w + 1 (8 KB) into shared memory
//                        (cp.async.bulk, an mbarrier per warp), the same bytes in flight.
// l2 = 1 adds ".L2::128B" to the loads (the persistent kernels' default), 2 ".L2::256B".
// Timing: %globaltimer stamps at every block's start and end, span = last end - first start, the
// median over reps (each rep on another region of a 4 GiB buffer, so L2 holds none of it).
//
// Usage: stream_probe [reps] ; prints one line per (pattern, l2, blocks/SM, size).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/gemv_ptx.cuh"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

constexpr int kRow = 4096, kTile = 16 * kRow, kThreads = 256;

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int kL2>
__device__ __forceinline__ uint4 Ld(const uint8_t* p) {
  uint4 r;
  if constexpr (kL2 == 2)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  else if constexpr (kL2 == 1)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

template <int kPat, int kL2, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    Probe(const uint8_t* base, int64_t tiles, uint32_t* sink, unsigned long long* stamps) {
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = Now();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  uint32_t acc = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint8_t* tile = base + t * kTile;
    uint4 v[16];
    if constexpr (kPat == 0) {
      const uint8_t* ra = tile + g * kRow + warp * 512 + q * 16;
      const uint8_t* rb = ra + 8 * kRow;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        v[2 * u] = Ld<kL2>(ra + 64 * u);
        v[2 * u + 1] = Ld<kL2>(rb + 64 * u);
      }
    } else if constexpr (kPat == 1) {
      const uint8_t* r0 = tile + 2 * warp * kRow + lane * 16;
#pragma unroll
      for (int u = 0; u < 16; ++u) v[u] = Ld<kL2>(r0 + (u >> 3) * kRow + (u & 7) * 512);
    } else if constexpr (kPat == 2) {
#pragma unroll
      for (int u = 0; u < 16; ++u) v[u] = Ld<kL2>(tile + u * kRow + threadIdx.x * 16);
    } else {
      extern __shared__ uint4 dyn[];
      __shared__ alignas(8) unsigned long long bar[kThreads / 32];
      uint4* dst = dyn + warp * (2 * kRow / 16);
      const uint32_t sbar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar[warp]));
      const uint32_t sdst = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
      if (t == blockIdx.x) {
        if (lane == 0) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sbar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        __syncwarp();
      }
      const uint32_t phase = static_cast<uint32_t>((t / gridDim.x) & 1);
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sbar), "r"(2 * kRow) : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sdst),
            "l"(tile + 2 * warp * kRow), "r"(2 * kRow), "r"(sbar)
            : "memory");
      }
      uint32_t done = 0;
      while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done) : "r"(sbar), "r"(phase) : "memory");
#pragma unroll
      for (int u = 0; u < 16; ++u) v[u] = dst[lane + 32 * u];
      // The reads above (generic proxy) before the next bulk copy writes dst (async proxy).
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads (whatever the value)
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x + 1] = Now();
}

// Pattern 4 "moe_gate_up": MoePersistentKernel's phase 2 at V2-Lite's shapes without its router
// or routing (the routed ids given): hidden 2,048, I 1,408, 6 routed experts of 64 (w13 [64, 2 I,
// hidden]) and the shared experts' gate_up [2 Is, hidden], Is 2,816; gu_ksplit 8 (a tile's hidden
// over the block's 8 warps), the shared tiles first, ptx::WarpTile16 with the 128-byte L2 fetch
// size on x in shared memory, the parts' sums into shared memory. Streams 92.3 MB.
constexpr int64_t kHd = 2048, kI = 1408, kIs = 2816, kE = 64, kK = 6;
template <int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    MoeGateUp(const __nv_bfloat16* w13, const __nv_bfloat16* sgu, int4 ids03, int2 ids45, uint32_t* sink,
              unsigned long long* stamps) {
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = Now();
  __shared__ alignas(16) __nv_bfloat16 xs[kHd];
  __shared__ float s_gu[16][8][16];
  for (int i = threadIdx.x; i < kHd; i += kThreads) xs[i] = __float2bfloat16_rn(0.01f * (i % 37));
  __syncthreads();
  const int ids[kK] = {ids03.x, ids03.y, ids03.z, ids03.w, ids45.x, ids45.y};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int64_t it = kI / 8, tiles_r = kK * it, ts = kIs / 8, tiles = tiles_r + ts;
  int r = 0;
  for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x, ++r) {
    const __nv_bfloat16* w;
    int64_t c0, half;
    if (i < ts) {
      c0 = i * 8;
      w = sgu;
      half = kIs;
    } else {
      const int64_t t = i - ts, j = t / it;
      c0 = (t % it) * 8;
      w = w13 + static_cast<int64_t>(ids[j]) * 2 * kI * kHd;
      half = kI;
    }
    const int64_t k0 = warp * (kHd / 8);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    ds::cuda::ptx::WarpTile16<1>(w + (c0 + g) * kHd + k0, w + (half + c0 + g) * kHd + k0, xs + k0, xs + k0, 8, d);
    if (q == 0) {
      s_gu[r][warp][g] = d[0];
      s_gu[r][warp][8 + g] = d[2];
    }
  }
  __syncthreads();
  if (threadIdx.x < 16 && s_gu[0][0][threadIdx.x] == 1234.5f) sink[0] = 1;
  if (threadIdx.x == 0) stamps[2 * blockIdx.x + 1] = Now();
}

__global__ void FillRandomBf16(__nv_bfloat16* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16_rn((static_cast<int>(h & 0xffff) - 32768) * (0.04f / 32768.f));
  }
}

using KernelFn = void (*)(const uint8_t*, int64_t, uint32_t*, unsigned long long*);

// One launch's span in us: the last block's end stamp minus the first block's start stamp.
double SpanUs(const unsigned long long* stamps, std::vector<unsigned long long>& h, int grid) {
  CK(cudaMemcpy(h.data(), stamps, sizeof(unsigned long long) * 2 * grid, cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull, t1 = 0;
  for (int b = 0; b < grid; ++b) {
    t0 = std::min(t0, h[2 * b]);
    t1 = std::max(t1, h[2 * b + 1]);
  }
  return (t1 - t0) / 1e3;
}

constexpr int kBulkSmem = (kThreads / 32) * 2 * kRow;

template <int kPat, int kL2>
KernelFn Pick(int bps) {
  return bps == 2 ? Probe<kPat, kL2, 2> : Probe<kPat, kL2, 1>;
}
KernelFn PickAll(int pat, int l2, int bps) {
  if (pat == 0) return l2 == 0 ? Pick<0, 0>(bps) : l2 == 1 ? Pick<0, 1>(bps) : Pick<0, 2>(bps);
  if (pat == 1) return l2 == 0 ? Pick<1, 0>(bps) : l2 == 1 ? Pick<1, 1>(bps) : Pick<1, 2>(bps);
  if (pat == 3) return Pick<3, 0>(bps);
  return l2 == 0 ? Pick<2, 0>(bps) : l2 == 1 ? Pick<2, 1>(bps) : Pick<2, 2>(bps);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t buf = size_t{4} << 30;
  uint8_t* base = nullptr;
  CK(cudaMalloc(&base, buf));
  FillRandomBf16<<<4 * sms, 256>>>(reinterpret_cast<__nv_bfloat16*>(base), static_cast<int64_t>(buf / 2));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 64));
  unsigned long long* stamps = nullptr;
  CK(cudaMalloc(&stamps, sizeof(unsigned long long) * 2 * 2 * sms));
  std::vector<unsigned long long> h(2 * 2 * sms);
  const char* names[4] = {"tile16", "rows", "block", "bulk"};
  CK(cudaFuncSetAttribute(Probe<3, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkSmem));
  CK(cudaFuncSetAttribute(Probe<3, 0, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkSmem));
  std::printf("pattern l2 blocks_per_sm tiles MB span_us_median TBps_median span_us_min\n");
  for (const int64_t tiles : {int64_t{1320}, int64_t{1408}, int64_t{32768}}) {
    const size_t bytes = size_t(tiles) * kTile;
    const size_t regions = std::max<size_t>(1, buf / bytes);
    for (int pat = 0; pat < 4; ++pat)
      for (int l2 = 0; l2 < (pat == 3 ? 1 : 3); ++l2)
        for (int bps = 1; bps <= 2; ++bps) {
          KernelFn k = PickAll(pat, l2, bps);
          const int grid = sms * bps;
          std::vector<double> spans;
          for (int r = -2; r < reps; ++r) {
            const uint8_t* p = base + (size_t((r + 2) % regions)) * bytes;
            k<<<grid, kThreads, pat == 3 ? kBulkSmem : 0>>>(p, tiles, sink, stamps);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            if (r >= 0) spans.push_back(SpanUs(stamps, h, grid));
          }
          std::sort(spans.begin(), spans.end());
          const double med = spans[spans.size() / 2];
          std::printf("%s %d %d %lld %.1f %.2f %.3f %.2f\n", names[pat], l2, bps, static_cast<long long>(tiles),
                      bytes / 1e6, med, bytes / med / 1e6, spans.front());
          std::fflush(stdout);
        }
  }
  // Pattern 4: w13 for 64 experts (738 MB) then 8 shared regions, rotated; the routed ids differ
  // per rep (no L2 reuse between reps). Its s_gu holds 16 rounds: at least 88 blocks.
  if (sms < 88) {
    std::printf("moe_gate_up skipped: %d SMs (needs 88)\n", sms);
  } else {
    const size_t w13_bytes = size_t(kE) * 2 * kI * kHd * 2, sgu_bytes = size_t(2) * kIs * kHd * 2;
    const auto* w13 = reinterpret_cast<const __nv_bfloat16*>(base);
    for (int bps = 1; bps <= 2; ++bps) {
      const int grid = sms * bps;
      auto k = bps == 2 ? MoeGateUp<2> : MoeGateUp<1>;
      std::vector<double> spans;
      for (int r = -2; r < reps; ++r) {
        const int rr = r + 2;
        const auto* sgu = reinterpret_cast<const __nv_bfloat16*>(base + w13_bytes + (rr % 8) * (sgu_bytes + 4096));
        const int b = (rr * 6) % 60;
        k<<<grid, kThreads>>>(w13, sgu, make_int4(b, b + 1, b + 2, b + 3), make_int2(b + 4, b + 5), sink, stamps);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        if (r >= 0) spans.push_back(SpanUs(stamps, h, grid));
      }
      std::sort(spans.begin(), spans.end());
      const double bytes = 2.0 * (kK * 2 * kI * kHd + 2 * kIs * kHd), med = spans[spans.size() / 2];
      std::printf("moe_gate_up 1 %d 1408 %.1f %.2f %.3f %.2f\n", bps, bytes / 1e6, med, bytes / med / 1e6, spans.front());
    }
  }
  CK(cudaFree(base));
  return 0;
}
