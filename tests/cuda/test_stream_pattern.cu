// Weight-stream access patterns on the device (session 21; a measurement, run with
// --gtest_also_run_disabled_tests): the persistent MoE kernel's phase 2 streams 16-row tiles of a
// [rows, 2048] bf16 weight with each tile's K split over a block's 8 warps, and a lane (g, q)
// reading rows g and g + 8 at k = 32 s + 8 q (gemv_ptx.cuh's WarpTile16Cols): each load
// instruction touches 8 rows x 64 bytes. This report streams the same bytes with the same loads in
// flight a lane (16 x 16 bytes) and the same grid (2 blocks of 256 threads a SM) in other
// patterns, to tell whether the pattern or the loads in flight bound the kernel's DRAM rate:
//   0 the kernel's (8 rows x 64 B an instruction);
//   1 the same with the .L2::128B fetch size (the runner's default since session 21);
//   2 coalesced rows: instruction i reads row i's 512 bytes of the warp's K range;
//   3 linear: the warp's 8 KB as one contiguous run (the tile's 16 rows re-cut);
//   4 pattern 1's loads as the MoE kernel's phase 2 issues and uses them (session 24): ptx::LoadSlice
//     then ptx::MmaSlice on an activation row in shared memory, the sums kept in shared memory.
// Each pattern's sum is checked against a host sum (every byte read once), so no load is dropped.
// (Session 24's runs 1-2 measured these patterns, and the MoE kernel's phase 2 without its
// routing, with a standalone program, bench/stream_probe.cu at a317baa, since folded into this.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int kThreads = 256, kWarps = 8, kRows = 16, kCols = 2048;
constexpr int64_t kTileElems = int64_t{kRows} * kCols;  // 16 x 2048 bf16 (64 KB)

template <int kMode>
__global__ void __launch_bounds__(kThreads, 2) StreamKernel(const __nv_bfloat16* w, int64_t tiles, uint32_t* out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  uint32_t acc = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const __nv_bfloat16* tile = w + t * kTileElems;
    const int k0 = warp * (kCols / kWarps);
    uint4 v[16];
    if constexpr (kMode == 4) {
      __shared__ alignas(16) __nv_bfloat16 xs[kCols];
      __shared__ float s_sum[kWarps][16];
      if (t == blockIdx.x) {
        for (int i = threadIdx.x; i < kCols; i += kThreads) xs[i] = __float2bfloat16_rn(0.01f * (i % 37));
        __syncthreads();
      }
      ptx::WarpSlice ws;
      ptx::LoadSlice<1>(tile + int64_t{g} * kCols + k0, tile + int64_t{g + 8} * kCols + k0, 8, ws);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      ptx::MmaSlice(ws, xs + k0, 8, d);
      if (q == 0) {
        s_sum[warp][g] = d[0];
        s_sum[warp][8 + g] = d[2];
      }
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        v[2 * s] = ws.a[s];
        v[2 * s + 1] = ws.b[s];
      }
    } else if constexpr (kMode == 0 || kMode == 1) {
      const uint4* ra = reinterpret_cast<const uint4*>(tile + int64_t{g} * kCols + k0) + q;
      const uint4* rb = reinterpret_cast<const uint4*>(tile + int64_t{g + 8} * kCols + k0) + q;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        v[2 * s] = ptx::LdStreamPf<kMode == 1 ? 1 : 0>(ra + 4 * s);
        v[2 * s + 1] = ptx::LdStreamPf<kMode == 1 ? 1 : 0>(rb + 4 * s);
      }
    } else if constexpr (kMode == 2) {
#pragma unroll
      for (int i = 0; i < 16; ++i)
        v[i] = ptx::LdStream(reinterpret_cast<const uint4*>(tile + int64_t{i} * kCols + k0) + lane);
    } else {
      const uint4* base = reinterpret_cast<const uint4*>(tile) + warp * 512;  // 8 KB a warp
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = ptx::LdStream(base + i * 32 + lane);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) acc += v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  atomicAdd(out, acc);
}

TEST(CudaStreamPattern, DISABLED_Report) {
  const int sms = CurrentDeviceProps().sms;
  const int grid = 2 * sms;
  constexpr int64_t kTiles = 1408;  // V2-Lite's phase 2: 6 x 1408 / 8 routed + 2816 / 8 shared tiles (92 MB)
  constexpr int kBufs = 4, kReps = 20;
  const int64_t elems = kTiles * kTileElems;
  std::vector<std::unique_ptr<Dev<uint32_t>>> bufs;  // each [elems / 2] words of bf16 pairs
  std::vector<uint32_t> host_sum(kBufs, 0);
  std::vector<uint32_t> h(static_cast<size_t>(elems / 2));
  for (int b = 0; b < kBufs; ++b) {
    uint32_t x = 0x9e3779b9u * (b + 1);
    for (auto& e : h) {
      x ^= x << 13; x ^= x >> 17; x ^= x << 5;
      e = x;
    }
    // Every pattern reads each 16 bytes once: acc sums, per 16 bytes, the xor of its 4 words.
    uint32_t sum = 0;
    for (size_t i = 0; i < h.size(); i += 4) sum += h[i] ^ h[i + 1] ^ h[i + 2] ^ h[i + 3];
    host_sum[b] = sum;
    bufs.push_back(std::make_unique<Dev<uint32_t>>(h));
  }
  const auto buf = [&](int b) { return reinterpret_cast<const __nv_bfloat16*>(bufs[b]->get()); };
  Dev<uint32_t> out(1);
  uint32_t* d_out = out.get();
  cudaEvent_t e0, e1;
  DS_CUDA_CHECK(cudaEventCreate(&e0));
  DS_CUDA_CHECK(cudaEventCreate(&e1));
  const auto run = [&](auto kernel, const char* name) {
    for (int b = 0; b < kBufs; ++b) {  // the check (and a warm-up)
      DS_CUDA_CHECK(cudaMemset(d_out, 0, sizeof(uint32_t)));
      kernel<<<grid, kThreads>>>(buf(b), kTiles, d_out);
      DS_CUDA_CHECK(cudaGetLastError());
      uint32_t got = 0;
      DS_CUDA_CHECK(cudaMemcpy(&got, d_out, sizeof(uint32_t), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, host_sum[b]) << name << " buffer " << b;
    }
    DS_CUDA_CHECK(cudaEventRecord(e0));
    for (int r = 0; r < kReps; ++r) kernel<<<grid, kThreads>>>(buf(r % kBufs), kTiles, d_out);
    DS_CUDA_CHECK(cudaGetLastError());
    DS_CUDA_CHECK(cudaEventRecord(e1));
    DS_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    DS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / kReps, gbs = elems * 2.0 / (us * 1e3);
    std::printf("[metric] op=stream_pattern pattern=%s bytes=%.1fMB grid=%d: %.2f us a launch, %.0f GB/s\n", name,
                elems * 2.0 / 1e6, grid, us, gbs);
  };
  for (int round = 0; round < 2; ++round) {
    run(StreamKernel<0>, "tile16_64B");
    run(StreamKernel<1>, "tile16_64B_L2_128B");
    run(StreamKernel<2>, "coalesced_rows");
    run(StreamKernel<3>, "linear");
    run(StreamKernel<4>, "tile16_64B_L2_128B_mma");
  }
  DS_CUDA_CHECK(cudaEventDestroy(e0));
  DS_CUDA_CHECK(cudaEventDestroy(e1));
}


// ---- How fast a short weight stream starts (session 25; DISABLED_StartReport) ----
// The attention kernel's phase 1 reads 15 MB (q_proj + kv_a) in ~7 us from its start whether
// each warp loads a 8 KB register burst a tile or thread 0 bulk-copies the block's two tiles
// into shared memory at the kernel's start (session 25 run 1): ~2.2 TB/s against ~4 at the bulk
// of a long stream. This kernel streams `tiles` 64 KB tiles (block b: b, b + grid, ...) on one
// block of 256 threads a SM, as the attention kernel, and stamps each block's start and end
// (%globaltimer), so that the span from the first start to the last end of a stream of 4-92 MB
// tells the start's cost from the rate; the launch before it either streams too (DRAM busy up
// to the start) or spins for `gap` us with no loads (DRAM idle, as after the attention chain).
//   kBulk false: each warp's 8 KB slice of a tile as 16 loads of 16 bytes a lane (pattern 1);
//   kBulk true: thread 0 bulk-copies tiles into a ring of 3 x 64 KB of shared memory (3 in
//   flight), every thread xors its share of a tile once it lands.
constexpr int kRing = 3;
constexpr size_t kBulkSmem = size_t{kRing} * kTileElems * 2;

// kBurst (register mode): tiles a warp loads before it uses them (1: 16 loads of 16 bytes a lane
// in flight; 2: 32).
template <bool kBulk, int kBurst = 1, int kBps = 1>
__global__ void __launch_bounds__(kThreads, kBps) StartKernel(const __nv_bfloat16* w, int64_t tiles, uint32_t* out,
                                                          uint64_t* stamps) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[kRing];
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = dev::GlobalTimerNs();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  uint32_t acc = 0;
  const int64_t mine = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  if constexpr (kBulk) {
    const auto issue = [&](int64_t i) {  // thread 0: the block's i-th tile into slot i % kRing
      const uint32_t bar = sm90::SmemAddr(&bars[i % kRing]);
      sm90::BarExpectTx(bar, static_cast<uint32_t>(kTileElems * 2));
      const __nv_bfloat16* src = w + (blockIdx.x + i * gridDim.x) * kTileElems;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                       sm90::SmemAddr(ring + (i % kRing) * kTileElems * 2)),
                   "l"(src), "r"(static_cast<uint32_t>(kTileElems * 2)), "r"(bar)
                   : "memory");
    };
    if (threadIdx.x == 0) {
      for (int k = 0; k < kRing; ++k) sm90::BarInit(sm90::SmemAddr(&bars[k]), 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      for (int64_t i = 0; i < mine && i < kRing; ++i) issue(i);
    }
    __syncthreads();
    for (int64_t i = 0; i < mine; ++i) {
      while (!sm90::BarTryWait(sm90::SmemAddr(&bars[i % kRing]), static_cast<uint32_t>((i / kRing) & 1))) {
      }
      const uint4* t4 = reinterpret_cast<const uint4*>(ring + (i % kRing) * kTileElems * 2);
      for (int e = threadIdx.x; e < kTileElems / 8; e += kThreads) {
        const uint4 v = t4[e];
        acc += v.x ^ v.y ^ v.z ^ v.w;
      }
      sm90::FenceProxyAsync();
      __syncthreads();
      if (threadIdx.x == 0 && i + kRing < mine) issue(i + kRing);
    }
  } else {
    for (int64_t t0 = blockIdx.x; t0 < tiles; t0 += kBurst * gridDim.x) {
      uint4 v[kBurst][16];
#pragma unroll
      for (int b = 0; b < kBurst; ++b) {
        const int64_t t = min(t0 + b * gridDim.x, tiles - 1);  // past the end: the last tile again (not summed)
        const __nv_bfloat16* tile = w + t * kTileElems;
        const int k0 = warp * (kCols / kWarps);
        const uint4* ra = reinterpret_cast<const uint4*>(tile + int64_t{g} * kCols + k0) + q;
        const uint4* rb = reinterpret_cast<const uint4*>(tile + int64_t{g + 8} * kCols + k0) + q;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          v[b][2 * s] = ptx::LdStreamPf<1>(ra + 4 * s);
          v[b][2 * s + 1] = ptx::LdStreamPf<1>(rb + 4 * s);
        }
      }
#pragma unroll
      for (int b = 0; b < kBurst; ++b)
        if (t0 + b * gridDim.x < tiles) {
#pragma unroll
          for (int i = 0; i < 16; ++i) acc += v[b][i].x ^ v[b][i].y ^ v[b][i].z ^ v[b][i].w;
        }
    }
  }
  atomicAdd(out, acc);
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x + 1] = dev::GlobalTimerNs();
}

// One thread spinning for `ns` nanoseconds (no memory traffic): the DRAM-idle gap before a stream.
__global__ void SpinKernel(uint64_t ns) {
  const uint64_t t0 = dev::GlobalTimerNs();
  while (dev::GlobalTimerNs() - t0 < ns) {
  }
}

// The start / smem reports' weights: `sets` buffers of kStartMaxTiles tiles (92 MB each, past L2
// together), each launch of a graph on its own.
constexpr int64_t kStartMaxTiles = 1408;
std::vector<std::unique_ptr<Dev<uint32_t>>> StreamBuffers(int sets) {
  std::vector<uint32_t> h(static_cast<size_t>(kStartMaxTiles * kTileElems / 2));
  uint32_t x = 0x2545f491u;
  for (auto& e : h) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    e = x;
  }
  std::vector<std::unique_ptr<Dev<uint32_t>>> bufs;
  for (int b = 0; b < sets; ++b) bufs.push_back(std::make_unique<Dev<uint32_t>>(h));
  return bufs;
}

// Replays g `replays` times after a warm-up; per launch i (stamps [sets][grid][start, end]) the
// span from its first block's start to its last block's end, and its last block's start; means
// in us.
struct StreamSpan {
  double span_us = 0, last_start_us = 0;
};
StreamSpan MeanSpan(const CapturedGraph& g, const Dev<uint64_t>& stamps, int grid, int sets, int replays) {
  g.Replay();
  StreamSpan m;
  for (int r = 0; r < replays; ++r) {
    g.Replay();
    const std::vector<uint64_t> t = stamps.Download();
    for (int i = 0; i < sets; ++i) {
      uint64_t s0 = UINT64_MAX, s1 = 0, e1 = 0;
      for (int b = 0; b < grid; ++b) {
        const size_t at = (static_cast<size_t>(i) * grid + b) * 2;
        s0 = std::min(s0, t[at]);
        s1 = std::max(s1, t[at]);
        e1 = std::max(e1, t[at + 1]);
      }
      m.span_us += 1e-3 * static_cast<double>(e1 - s0);
      m.last_start_us += 1e-3 * static_cast<double>(s1 - s0);
    }
  }
  m.span_us /= replays * sets;
  m.last_start_us /= replays * sets;
  return m;
}

TEST(CudaStreamPattern, DISABLED_StartReport) {
  const int grid = CurrentDeviceProps().sms;
  constexpr int kSets = 8, kReplays = 6;
  const std::vector<std::unique_ptr<Dev<uint32_t>>> bufs = StreamBuffers(kSets);
  Dev<uint32_t> out(1);
  Dev<uint64_t> stamps(static_cast<size_t>(kSets) * grid * 2);
  DS_CUDA_CHECK(cudaFuncSetAttribute(StartKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kBulkSmem)));
  constexpr int kMaxPad = 205 * 1024;  // register modes: unused dynamic shared memory (less L1)
  DS_CUDA_CHECK(cudaFuncSetAttribute(StartKernel<false, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxPad));
  DS_CUDA_CHECK(cudaFuncSetAttribute(StartKernel<false, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxPad));
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // mode 0: bulk; 1 / 2: register bursts of 1 / 2 tiles; each register mode with 0, 100, 140 and
  // 205 KB of unused dynamic shared memory (the attention kernel holds ~140 KB: L1 keeps the rest).
  struct Mode {
    int kind;
    int pad_kb;
  };
  std::vector<Mode> modes = {{0, 0}};
  for (int kind : {1, 2})
    for (int pad : {0, 100, 140, 205}) modes.push_back({kind, pad});
  for (const Mode m : modes) {
    const bool bulk = m.kind == 0;
    const size_t pad = static_cast<size_t>(m.pad_kb) * 1024;
    for (const int64_t tiles : {int64_t{64}, int64_t{132}, int64_t{228}, int64_t{456}, kStartMaxTiles}) {
      for (const int gap_us : {0, 14}) {
        if (gap_us > 0 && !(m.kind == 1 && m.pad_kb == 0) && !bulk) continue;  // the gap: two modes
        const CapturedGraph gr(st, [&] {
          for (int i = 0; i < kSets; ++i) {
            if (gap_us > 0) SpinKernel<<<1, 32, 0, st>>>(uint64_t{1000} * gap_us);
            const auto* w = reinterpret_cast<const __nv_bfloat16*>(bufs[i]->get());
            uint64_t* sp = stamps.get() + static_cast<size_t>(i) * grid * 2;
            if (bulk) StartKernel<true><<<grid, kThreads, kBulkSmem, st>>>(w, tiles, out.get(), sp);
            else if (m.kind == 1) StartKernel<false, 1><<<grid, kThreads, pad, st>>>(w, tiles, out.get(), sp);
            else StartKernel<false, 2><<<grid, kThreads, pad, st>>>(w, tiles, out.get(), sp);
            DS_CUDA_CHECK(cudaGetLastError());
          }
        });
        const StreamSpan sp = MeanSpan(gr, stamps, grid, kSets, kReplays);
        const double span = sp.span_us, last_start = sp.last_start_us;
        const double mb = tiles * kTileElems * 2.0 / 1e6;
        const std::string name = bulk ? std::string("bulk_smem")
                                      : "register_burst" + std::to_string(m.kind) + "_smem" + std::to_string(m.pad_kb) + "KB";
        std::printf("[metric] op=stream_start mode=%s bytes=%.1fMB gap_before=%dus: first start to last end %.2f us "
                    "(%.0f GB/s; last block started at %.2f us)\n",
                    name.c_str(), mb, gap_us, span, mb * 1e3 / span, last_start);
      }
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}


// Which shared-memory footprints slow a weight stream (session 25, DISABLED_SmemReport): run 4 of
// DISABLED_StartReport streamed 92 MB at 4.2 TB/s with 0 or 140 KB of unused dynamic shared memory
// a block but at 3.2 TB/s with 100 or 205 KB. This sweeps the footprint (unused dynamic shared
// memory a block) for one and two blocks of 256 threads a SM, register bursts of one tile (16 loads
// of 16 bytes a lane), with the driver's carveout and with explicit carveout hints
// (cudaFuncAttributePreferredSharedMemoryCarveout, percent of the maximum).
TEST(CudaStreamPattern, DISABLED_SmemReport) {
  const int sms = CurrentDeviceProps().sms;
  constexpr int kSets = 8, kReplays = 5;
  const std::vector<std::unique_ptr<Dev<uint32_t>>> bufs = StreamBuffers(kSets);
  Dev<uint32_t> out(1);
  Dev<uint64_t> stamps(static_cast<size_t>(kSets) * 2 * sms * 2);
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Cfg {
    int bps, pad_kb, carveout;  // carveout -1: the driver's choice
  };
  std::vector<Cfg> cfgs;
  for (int pad : {0, 8, 40, 72, 90, 100, 110, 120, 130, 140, 150, 160, 180, 205}) cfgs.push_back({1, pad, -1});
  for (int pad : {0, 40, 100, 140}) cfgs.push_back({1, pad, 100});
  for (int pad : {0, 40, 100}) cfgs.push_back({1, pad, 72});
  for (int pad : {0, 20, 30, 43, 50, 60, 64, 80, 100}) cfgs.push_back({2, pad, -1});
  for (int pad : {0, 43}) cfgs.push_back({2, pad, 100});
  for (int pad : {0, 43}) cfgs.push_back({2, pad, 50});
  for (const Cfg c : cfgs) {
    auto kernel = c.bps == 1 ? StartKernel<false, 1, 1> : StartKernel<false, 1, 2>;
    DS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 210 * 1024));
    DS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, c.carveout));
    const size_t pad = static_cast<size_t>(c.pad_kb) * 1024;
    int per_sm = 0;
    DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, pad));
    if (per_sm < c.bps) {
      std::printf("[metric] op=stream_smem bps=%d pad=%dKB carveout=%d: does not fit (%d a SM)\n", c.bps, c.pad_kb,
                  c.carveout, per_sm);
      continue;
    }
    const int grid = c.bps * sms;
    for (const int64_t tiles : {int64_t{228}, kStartMaxTiles}) {
      const CapturedGraph gr(st, [&] {
        for (int i = 0; i < kSets; ++i) {
          kernel<<<grid, kThreads, pad, st>>>(reinterpret_cast<const __nv_bfloat16*>(bufs[i]->get()), tiles, out.get(),
                                             stamps.get() + static_cast<size_t>(i) * grid * 2);
          DS_CUDA_CHECK(cudaGetLastError());
        }
      });
      const double span = MeanSpan(gr, stamps, grid, kSets, kReplays).span_us;
      const double mb = tiles * kTileElems * 2.0 / 1e6;
      std::printf("[metric] op=stream_smem bps=%d pad=%dKB carveout=%d bytes=%.1fMB: %.2f us (%.0f GB/s)\n", c.bps,
                  c.pad_kb, c.carveout, mb, span, mb * 1e3 / span);
    }
  }
  // The carveout is the kernels' for the whole process: back to the driver's choice for the other reports.
  for (auto kernel : {StartKernel<false, 1, 1>, StartKernel<false, 1, 2>})
    DS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, -1));
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace ds::cuda::test
