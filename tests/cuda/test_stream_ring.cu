// The first question of "the MoE layer on a TMA ring" (docs/design/decode_small_batch.md, session 31;
// written in session 31 and NOT YET RUN on a GPU: run it with --gtest_also_run_disabled_tests
// --gtest_filter='CudaStreamRing.*' before building the kernel). Does a weight stream through a
// shared-memory ring, filled by 2-d TMA copies from one producer warp, keep DRAM busy at one block
// a SM, and how soon after a grid barrier does the first stage of the next phase arrive?
//
// One block a SM (forced by the dynamic shared memory, checked by %smid): 8 consumer warps and P
// producer warps. The weights are 16-row tiles of a [rows, 2048] bf16 matrix (the MoE kernel's
// gate_up tiles), tile t on block t % grid; a tile is two ring stages, and stage k of a block holds,
// for consumer warp w, the slice of 16 rows x 128 columns at column (2 w + k % 2) x 128 (4 KB; a
// stage 32 KB). Producer warp j's lane 0 issues the copies of slices j, j + P, ... (one box each;
// a TMA copy takes warp-uniform operands, so the lanes of one warp would issue one at a time) after
// the stage's empty mbarrier (its 8 consumers' arrivals), with its own expect_tx (the full
// mbarrier counts P arrivals); the consumers wait for the full mbarrier, then run WarpTile16Cols's
// mma on the slice from shared memory in its lane order (rows g and g + 8, 16 bytes at step s,
// lane q), and arrive on the empty one. After phase A's tiles the consumers pass a grid barrier
// (their own: the producers never wait for it, so the ring keeps filling with phase B's first
// stages), then consume phase B's tiles. Stamps (%globaltimer): start, phase A consumed, the barrier
// passed, phase B's first stage full, the end; and the block's SM.
//
// Printed per (producer warps, stages): the whole launch's rate (the DRAM rate: every byte once);
// phase A's consumption rate (92 MB over the first start to the last block's phase A end: it
// understates DRAM, since the producers have also read up to `stages` phase-B stages by then); the
// blocks' phase-A imbalance (last minus first end, ~one tile: 1,408 tiles on 132 blocks) and the
// barrier's release after the last arrival; the median wait from the barrier to phase B's first
// full stage (~0 where the ring filled it before the barrier).
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

constexpr int kConsumers = 8, kMaxProducers = 4, kMaxThreads = 32 * (kConsumers + kMaxProducers);
constexpr int kCols = 2048, kBoxCols = 128, kBoxRows = 16;
constexpr int kSliceBytes = kBoxRows * kBoxCols * 2;        // 4 KB
constexpr int kStageBytes = kConsumers * kSliceBytes;       // 32 KB
constexpr int kMaxStages = 4;
constexpr int kStamps = 6;  // start, phase A consumed, barrier passed, phase B's first full stage, end, SM
constexpr int kOneBlockSmem = 120 * 1024;  // at least this much dynamic shared memory: one block a SM

struct RingParams {
  int64_t tiles_a = 0, tiles_b = 0;  // phase A's tiles, then phase B's (rows 16 tiles_a ...)
  int producers = 1, stages = 2;     // producer warps (1, 2 or 4), ring stages (<= kMaxStages)
  uint32_t* sync = nullptr;          // a grid_barrier.cuh counter (2 words, zero before the first launch)
  uint32_t* out = nullptr;           // the consumers' sums (kept live)
  uint64_t* stamps = nullptr;        // [grid, kStamps]
};

// Tiles of [0, n) on block b of `grid` (t % grid == b).
__device__ __forceinline__ int64_t TilesOf(int64_t n, int b, int grid) { return b < n ? (n - 1 - b) / grid + 1 : 0; }

__global__ void __launch_bounds__(kMaxThreads, 1) RingKernel(const __grid_constant__ CUtensorMap map, RingParams p) {
  extern __shared__ __align__(1024) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ __align__(16) __nv_bfloat16 xs[kCols];
  __shared__ uint64_t s_base;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  uint64_t* st = p.stamps + static_cast<int64_t>(b) * kStamps;
  if (threadIdx.x == 0) {
    st[0] = dev::GlobalTimerNs();
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    st[5] = smid;
    s_base = grid::GridBase(p.sync);
    for (int s = 0; s < p.stages; ++s) {
      sm90::BarInit(sm90::SmemAddr(&full[s]), static_cast<uint32_t>(p.producers));
      sm90::BarInit(sm90::SmemAddr(&empty[s]), kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < kCols; i += static_cast<int>(blockDim.x)) xs[i] = __float2bfloat16_rn(0.01f * static_cast<float>(i % 37));
  __syncthreads();
  const int stages_a = static_cast<int>(2 * TilesOf(p.tiles_a, b, grid));
  const int stages_all = stages_a + static_cast<int>(2 * TilesOf(p.tiles_b, b, grid));
  if (warp >= kConsumers) {  // producer warp j = warp - kConsumers: slices j, j + P, ...
    const int j = warp - kConsumers;
    int slot = 0;
    uint32_t use = 0;  // the slot's use count (parity of its barriers)
    int64_t tile = b;  // the tile of stage k: phase A's b, b + grid, ..., then phase B's
    for (int k = 0; k < stages_all; ++k) {
      if (k == stages_a) tile = p.tiles_a + b;
      if (k >= p.stages)  // the slot's previous use consumed
        while (!sm90::BarTryWait(sm90::SmemAddr(&empty[slot]), (use - 1) & 1u)) {
        }
      if (lane == 0) {
        const uint32_t bar = sm90::SmemAddr(&full[slot]);
        int boxes = 0;
        for (int w = j; w < kConsumers; w += p.producers) ++boxes;
        sm90::BarExpectTx(bar, static_cast<uint32_t>(boxes * kSliceBytes));
        for (int w = j; w < kConsumers; w += p.producers) {
          const uint32_t dst = sm90::SmemAddr(ring + slot * kStageBytes + w * kSliceBytes);
          const int col = (2 * w + (k & 1)) * kBoxCols, row = static_cast<int>(16 * tile);
          asm volatile(
              "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                  dst),
              "l"(reinterpret_cast<uint64_t>(&map)), "r"(col), "r"(row), "r"(bar)
              : "memory");
        }
      }
      __syncwarp();
      if (k & 1) tile += grid;
      if (++slot == p.stages) { slot = 0; ++use; }
    }
    return;
  }
  // The consumers.
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const auto consumers_grid_barrier = [&] {  // grid_barrier.cuh's protocol, the launch's only (final) barrier
    sm90::NamedBarSync(1, kConsumers * 32);
    if (threadIdx.x == 0) {
      st[1] = dev::GlobalTimerNs();
      grid::GridArriveAndWait(p.sync, s_base + static_cast<uint64_t>(grid), /*final=*/true);
      st[2] = dev::GlobalTimerNs();
    }
    sm90::NamedBarSync(1, kConsumers * 32);
  };
  int slot = 0;
  uint32_t use = 0;
  for (int k = 0; k < stages_all; ++k) {
    if (k == stages_a) consumers_grid_barrier();  // phase A consumed
    while (!sm90::BarTryWait(sm90::SmemAddr(&full[slot]), use & 1u)) {
    }
    if (k == stages_a && threadIdx.x == 0) st[3] = dev::GlobalTimerNs();
    const unsigned char* slice = ring + slot * kStageBytes + warp * kSliceBytes;  // [16 rows][128 columns] bf16
    const int c0 = (2 * warp + (k & 1)) * kBoxCols;
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
    if (++slot == p.stages) { slot = 0; ++use; }
  }
  if (stages_all == stages_a) {  // (a block without phase B tiles)
    consumers_grid_barrier();
    if (threadIdx.x == 0) st[3] = st[2];
  }
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
  const double mb_a = kTilesA * 16.0 * kCols * 2 / 1e6, mb_all = (kTilesA + kTilesB) * 16.0 * kCols * 2 / 1e6;
  for (const int stages : {2, 4}) {
    const int smem = std::max(stages * kStageBytes, kOneBlockSmem);
    DS_CUDA_CHECK(cudaFuncSetAttribute(RingKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (const int producers : {1, 2, 4}) {
      const int threads = 32 * (kConsumers + producers);
      int per_sm = 0;
      DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, RingKernel, threads, smem));
      ASSERT_EQ(per_sm, 1) << "the probe needs exactly one block a SM";
      RingParams p;
      p.tiles_a = kTilesA;
      p.tiles_b = kTilesB;
      p.producers = producers;
      p.stages = stages;
      p.sync = sync.get();
      p.out = out.get();
      p.stamps = stamps.get();
      std::vector<double> rate_all, rate_a, imbalance, release, wait_b;
      for (int rep = 0; rep < 3 * kSets; ++rep) {
        // Cooperative: the consumers' grid barrier needs every block resident.
        const CUtensorMap& m = maps[rep % kSets];
        void* args[] = {const_cast<CUtensorMap*>(&m), &p};
        DS_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(RingKernel), dim3(grid), dim3(threads), args,
                                                  static_cast<size_t>(smem), stream));
        DS_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (rep < kSets) continue;  // warm-up
        const std::vector<uint64_t> t = stamps.Download();
        uint64_t t0 = UINT64_MAX, a_first = UINT64_MAX, a_last = 0, pass_last = 0, end = 0;
        std::vector<double> waits;
        std::vector<uint64_t> sms;
        for (int i = 0; i < grid; ++i) {
          const uint64_t* s = t.data() + static_cast<size_t>(i) * kStamps;
          t0 = std::min(t0, s[0]);
          a_first = std::min(a_first, s[1]);
          a_last = std::max(a_last, s[1]);
          pass_last = std::max(pass_last, s[2]);
          end = std::max(end, s[4]);
          waits.push_back(1e-3 * static_cast<double>(s[3] - s[2]));
          sms.push_back(s[5]);
        }
        std::sort(sms.begin(), sms.end());
        EXPECT_EQ(std::unique(sms.begin(), sms.end()) - sms.begin(), grid) << "blocks shared an SM";
        rate_all.push_back(mb_all / (1e-3 * static_cast<double>(end - t0)));  // MB / us = TB/s
        rate_a.push_back(mb_a / (1e-3 * static_cast<double>(a_last - t0)));
        imbalance.push_back(1e-3 * static_cast<double>(a_last - a_first));
        release.push_back(1e-3 * static_cast<double>(pass_last - a_last));
        wait_b.push_back(Median(waits));
      }
      std::printf("[metric] op=stream_ring stages=%d producer_warps=%d: whole launch %.2f TB/s (%.1f MB in %.2f us); "
                  "phase A consumed at %.2f TB/s; phase-A end spread %.2f us, barrier release after the last "
                  "arrival %.2f us; barrier to phase B's first full stage (median block) %.2f us\n",
                  stages, producers, Median(rate_all), mb_all, mb_all / Median(rate_all), Median(rate_a),
                  Median(imbalance), Median(release), Median(wait_b));
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace ds::cuda::test
