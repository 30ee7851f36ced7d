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
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
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

}  // namespace
}  // namespace ds::cuda::test
