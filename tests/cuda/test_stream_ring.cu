// The first question of "the MoE layer on a TMA ring" (docs/design/decode_small_batch.md, session 31;
// written in session 31 and NOT YET RUN on a GPU: run it with --gtest_also_run_disabled_tests
// --gtest_filter='CudaStreamRing.*' before building the kernel). Does a weight stream through a
// shared-memory ring, filled by 2-d TMA copies from one producer warp, keep DRAM busy at one block
// a SM, and how soon after a grid barrier does the first stage of the next phase arrive?
//
// One block a SM: 8 consumer warps and 1 producer warp. The weights are 16-row tiles of a
// [rows, 2048] bf16 matrix (the MoE kernel's gate_up tiles), tile t on block t % grid; a tile is
// two ring stages, and stage k of a block holds, for consumer warp w, the slice of 16 rows x 128
// columns at column (2 w + k % 2) x 128 (4 KB; a stage 32 KB). The producer's lanes < `lanes`
// issue the 8 slices' copies of a stage (one box each), after the stage's empty mbarrier (its 8
// consumers' arrivals); the consumers wait for its full mbarrier, then run WarpTile16Cols's mma on
// the slice from shared memory in its lane order (rows g and g + 8, 16 bytes at step s, lane q),
// and arrive on the empty one. After phase A's tiles the consumers pass a grid barrier (their own:
// the producer never waits for it, so the ring keeps filling with phase B's first stages), then
// consume phase B's tiles. Stamps (%globaltimer): start, phase A consumed, the barrier passed,
// phase B's first stage full, the end.
//
// Printed per (lanes, stages): phase A's rate (its bytes from the first start to the last block's
// phase A end), the barrier's span, the median wait from the barrier to phase B's first full stage
// (0 where the ring filled it before the barrier), and the whole launch's rate.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/gemv_ptx.cuh"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/tensor_map.h"
#include "test_util.h"
// (After test_util.h: its inline helpers must not see runner_kernels.h's ds::cuda::F32ToBf16.)
#include "backend/cuda/runner_kernels.h"

namespace ds::cuda::test {
namespace {

constexpr int kConsumers = 8, kThreads = 32 * (kConsumers + 1);
constexpr int kCols = 2048, kBoxCols = 128, kBoxRows = 16;
constexpr int kSliceBytes = kBoxRows * kBoxCols * 2;        // 4 KB
constexpr int kStageBytes = kConsumers * kSliceBytes;       // 32 KB
constexpr int kMaxStages = 4;
constexpr int kStamps = 5;

struct RingParams {
  int64_t tiles_a = 0, tiles_b = 0;  // phase A's tiles, then phase B's (rows 16 tiles_a ...)
  int lanes = 1, stages = 2;
  uint32_t* sync = nullptr;          // a grid_barrier.cuh counter (2 words, zero before the first launch)
  uint32_t* out = nullptr;           // the consumers' sums (kept live)
  uint64_t* stamps = nullptr;        // [grid, kStamps]
};

// Tiles of [0, n) on block b of `grid` (t % grid == b).
__device__ __forceinline__ int64_t TilesOf(int64_t n, int b, int grid) { return b < n ? (n - 1 - b) / grid + 1 : 0; }

__global__ void __launch_bounds__(kThreads, 1) RingKernel(const __grid_constant__ CUtensorMap map, RingParams p) {
  extern __shared__ __align__(1024) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ __align__(16) __nv_bfloat16 xs[kCols];
  __shared__ uint64_t s_base;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  uint64_t* st = p.stamps + static_cast<int64_t>(b) * kStamps;
  if (threadIdx.x == 0) {
    st[0] = dev::GlobalTimerNs();
    s_base = grid::GridBase(p.sync);
    for (int s = 0; s < p.stages; ++s) {
      sm90::BarInit(sm90::SmemAddr(&full[s]), 1);
      sm90::BarInit(sm90::SmemAddr(&empty[s]), kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < kCols; i += kThreads) xs[i] = __float2bfloat16_rn(0.01f * static_cast<float>(i % 37));
  __syncthreads();
  const int64_t stages_a = 2 * TilesOf(p.tiles_a, b, grid), stages_all = stages_a + 2 * TilesOf(p.tiles_b, b, grid);
  const auto tile_of = [&](int64_t k) {  // the tile of the block's stage k
    return k < stages_a ? b + int64_t{grid} * (k / 2) : p.tiles_a + b + int64_t{grid} * ((k - stages_a) / 2);
  };
  if (warp == kConsumers) {  // the producer
    for (int64_t k = 0; k < stages_all; ++k) {
      const int slot = static_cast<int>(k % p.stages);
      if (k >= p.stages)  // the slot's previous stage consumed
        while (!sm90::BarTryWait(sm90::SmemAddr(&empty[slot]), static_cast<uint32_t>((k / p.stages - 1) & 1))) {
        }
      if (lane == 0) sm90::BarExpectTx(sm90::SmemAddr(&full[slot]), kStageBytes);
      __syncwarp();
      if (lane < p.lanes) {
        const int64_t t = tile_of(k);
        for (int w = lane; w < kConsumers; w += p.lanes) {
          const uint32_t dst = sm90::SmemAddr(ring + slot * kStageBytes + w * kSliceBytes);
          const int col = (2 * w + static_cast<int>(k % 2)) * kBoxCols, row = static_cast<int>(16 * t);
          asm volatile(
              "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                  dst),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(sm90::SmemAddr(&full[slot]))
              : "memory");
        }
      }
    }
    return;
  }
  // The consumers.
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const auto consumers_grid_barrier = [&] {  // grid_barrier.cuh's protocol, the launch's only (final) barrier
    sm90::NamedBarSync(1, kConsumers * 32);
    if (threadIdx.x == 0) {
      st[1] = dev::GlobalTimerNs();
      const uint64_t target = s_base + static_cast<uint64_t>(grid);
      uint64_t old;
      asm volatile("atom.add.release.gpu.global.u64 %0, [%1], %2;" : "=l"(old) : "l"(p.sync), "l"(uint64_t{1}) : "memory");
      while (grid::LdAcquire64(p.sync) < target) {
      }
      if (old + 1 == target)  // the last arrival pads the counter to the next launch's base
        asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p.sync), "l"(grid::kGridEpoch - target % grid::kGridEpoch)
                     : "memory");
      st[2] = dev::GlobalTimerNs();
    }
    sm90::NamedBarSync(1, kConsumers * 32);
  };
  for (int64_t k = 0; k < stages_all; ++k) {
    if (k == stages_a) consumers_grid_barrier();  // phase A consumed
    const int slot = static_cast<int>(k % p.stages);
    while (!sm90::BarTryWait(sm90::SmemAddr(&full[slot]), static_cast<uint32_t>((k / p.stages) & 1))) {
    }
    if (k == stages_a && threadIdx.x == 0) st[3] = dev::GlobalTimerNs();
    const unsigned char* slice = ring + slot * kStageBytes + warp * kSliceBytes;  // [16 rows][128 columns] bf16
    const int c0 = (2 * warp + static_cast<int>(k % 2)) * kBoxCols;
#pragma unroll
    for (int s = 0; s < kBoxCols / 32; ++s) {
      const uint4 va = *reinterpret_cast<const uint4*>(slice + g * (kBoxCols * 2) + s * 64 + q * 16);
      const uint4 vb = *reinterpret_cast<const uint4*>(slice + (g + 8) * (kBoxCols * 2) + s * 64 + q * 16);
      const uint4 xv = *reinterpret_cast<const uint4*>(xs + c0 + 32 * s + 8 * q);
      ptx::Mma(d, va.x, vb.x, va.y, vb.y, xv.x, xv.y);
      ptx::Mma(d, va.z, vb.z, va.w, vb.w, xv.z, xv.w);
    }
    __syncwarp();
    if (lane == 0) sm90::BarArrive(sm90::SmemAddr(&empty[slot]));
  }
  if (stages_all == stages_a) consumers_grid_barrier();  // (a block without phase B tiles)
  atomicXor(p.out, __float_as_uint(d[0] + d[1] + d[2] + d[3]));
  sm90::NamedBarSync(1, kConsumers * 32);
  if (threadIdx.x == 0) st[4] = dev::GlobalTimerNs();
}

CUtensorMap RingMap(const __nv_bfloat16* w, int64_t rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kCols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kCols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBoxCols), static_cast<cuuint32_t>(kBoxRows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = TensorMapEncodeFn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(w), dims,
                                         strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "RingMap: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ")";
  return map;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// V2-Lite's MoE layer in bytes: phase A the gate_up tiles (1,408 x 64 KB = 92 MB), phase B the
// down tiles' bytes as 704 more tiles (46 MB); 4 weight sets in turn, so each launch reads DRAM.
TEST(CudaStreamRing, DISABLED_RingReport) {
  const int grid = CurrentDeviceProps().sms;
  constexpr int64_t kTilesA = 1408, kTilesB = 704, kSets = 4, kRowsPerSet = 16 * (kTilesA + kTilesB);
  Dev<__nv_bfloat16> w(static_cast<size_t>(kSets * kRowsPerSet * kCols));  // 554 MB, filled on the device
  RandomUniformBf16(w.get(), kSets * kRowsPerSet * kCols, 0.05f, NextSeed(), nullptr);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  Dev<uint32_t> sync(std::vector<uint32_t>{0, 0}), out(std::vector<uint32_t>{0});
  Dev<uint64_t> stamps(static_cast<size_t>(grid) * kStamps);
  std::vector<CUtensorMap> maps;
  for (int s = 0; s < kSets; ++s) maps.push_back(RingMap(w.get() + static_cast<int64_t>(s) * kRowsPerSet * kCols, kRowsPerSet));
  cudaStream_t stream;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const int stages : {2, 4}) {
    const int smem = stages * kStageBytes;
    DS_CUDA_CHECK(cudaFuncSetAttribute(RingKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (const int lanes : {1, 4, 8}) {
      RingParams p;
      p.tiles_a = kTilesA;
      p.tiles_b = kTilesB;
      p.lanes = lanes;
      p.stages = stages;
      p.sync = sync.get();
      p.out = out.get();
      p.stamps = stamps.get();
      std::vector<double> rate_a, bar, wait_b, rate_all;
      for (int rep = 0; rep < 3 * kSets; ++rep) {
        // Cooperative: the consumers' grid barrier needs every block resident.
        const CUtensorMap& m = maps[rep % kSets];
        void* args[] = {const_cast<CUtensorMap*>(&m), &p};
        DS_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(RingKernel), dim3(grid), dim3(kThreads), args,
                                                  static_cast<size_t>(smem), stream));
        DS_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (rep < kSets) continue;  // warm-up
        const std::vector<uint64_t> t = stamps.Download();
        uint64_t t0 = UINT64_MAX, a1 = 0, b0 = 0, end = 0, bar0 = UINT64_MAX;
        std::vector<double> waits;
        for (int i = 0; i < grid; ++i) {
          const uint64_t* s = t.data() + static_cast<size_t>(i) * kStamps;
          t0 = std::min(t0, s[0]);
          a1 = std::max(a1, s[1]);
          bar0 = std::min(bar0, s[1]);
          b0 = std::max(b0, s[2]);
          end = std::max(end, s[4]);
          waits.push_back(1e-3 * static_cast<double>(s[3] > s[2] ? s[3] - s[2] : 0));
        }
        const double mb_a = kTilesA * 16.0 * kCols * 2 / 1e6, mb_all = (kTilesA + kTilesB) * 16.0 * kCols * 2 / 1e6;
        rate_a.push_back(mb_a / (1e-3 * static_cast<double>(a1 - t0)));  // MB / us = TB/s
        bar.push_back(1e-3 * static_cast<double>(b0 - bar0));
        wait_b.push_back(Median(waits));
        rate_all.push_back(mb_all / (1e-3 * static_cast<double>(end - t0)));
      }
      std::printf("[metric] op=stream_ring stages=%d lanes=%d: phase A %.2f TB/s, barrier span %.2f us, barrier to phase "
                  "B's first full stage (median block) %.2f us, whole launch %.2f TB/s\n",
                  stages, lanes, Median(rate_a), Median(bar), Median(wait_b), Median(rate_all));
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace ds::cuda::test
