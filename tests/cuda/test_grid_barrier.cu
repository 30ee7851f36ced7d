// The grid barrier of the persistent kernels (grid_barrier.cuh), alone: a cooperative kernel of
// one or two blocks a SM that runs many barriers, each block writing a round stamp into its own
// slot before a barrier and checking every other block's slot after it (a barrier that let a
// block through early, or did not order the stores, shows as mismatches); the count word must be
// back at 0 and the generation advanced by the barrier count, over direct launches and CUDA-graph
// replays. A disabled report times a barrier (launches of 64 barriers minus launches of none)
// against two other forms: polling relaxed with a fence after, and one counter that never resets
// (arrivals counted from the value read at the start; no second atomic on the critical path),
// and the latency of one point-to-point dependency hop between blocks (HopChainKernel).
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/grid_barrier.cuh"
#include "backend/cuda/launch.cuh"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int kThreads = 256;

// 2 x rounds barriers: in round r, block b writes r + 1 into slots[b], then a barrier, then every
// block checks that all slots hold r + 1 (through L2) and counts the ones that do not, then a
// barrier (no block may write round r + 1's stamp before every block has checked round r).
__global__ void __launch_bounds__(kThreads, 1) BarrierCheckKernel(uint32_t* sync, uint32_t* slots, uint32_t* errors,
                                                                  int rounds) {
  __shared__ uint32_t gen0;
  if (threadIdx.x == 0) gen0 = grid::GridGeneration(sync);
  __syncthreads();
  const uint32_t g0 = gen0;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) slots[blockIdx.x] = static_cast<uint32_t>(r + 1);
    grid::GridBarrier(sync, g0 + 2 * static_cast<uint32_t>(r) + 1);
    uint32_t bad = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) bad += __ldcg(slots + b) != static_cast<uint32_t>(r + 1);
    if (bad) atomicAdd(errors, bad);
    // Nobody may overwrite a slot for round r + 1 before every block has checked round r.
    grid::GridBarrier(sync, g0 + 2 * static_cast<uint32_t>(r) + 2);
  }
}

// The alternative forms, for the timing report only.
__device__ __forceinline__ void BarrierRelaxedPoll(uint32_t* sync, uint32_t target_gen) {
  __syncthreads();
  if (threadIdx.x == 0 && !grid::ArriveLast(sync)) {
    uint32_t v;
    do {
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(sync + 1) : "memory");
    } while (static_cast<int32_t>(v - target_gen) < 0);
    __threadfence();
  }
  __syncthreads();
}
// One counter, never reset: barrier i of a launch completes when it reaches base + i * grid.
__device__ __forceinline__ void BarrierCounter(uint32_t* counter, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    while (static_cast<int32_t>(grid::LdAcquire(counter) - target) < 0) {
    }
  }
  __syncthreads();
}

template <int kForm>
__global__ void __launch_bounds__(kThreads, 1) BarrierTimeKernel(uint32_t* sync, int rounds) {
  __shared__ uint32_t base;
  if (threadIdx.x == 0) base = kForm == 2 ? grid::LdAcquire(sync + 2) : grid::GridGeneration(sync);
  __syncthreads();
  for (int r = 1; r <= rounds; ++r) {
    if constexpr (kForm == 0) grid::GridBarrier(sync, base + static_cast<uint32_t>(r));
    else if constexpr (kForm == 1) BarrierRelaxedPoll(sync, base + static_cast<uint32_t>(r));
    else BarrierCounter(sync + 2, base + static_cast<uint32_t>(r) * gridDim.x);
  }
}

// A chain of dependency hops between blocks (the megakernel design's per-op counters,
// decode_small_batch.md "Next: the batch-1 layer as one kernel"): after one grid barrier (every
// block has read the hop counter's start value), round r belongs to block r % grid, whose thread
// 0 waits until the counter reaches base + r (acquire) and then bumps it (release), so each hop
// crosses to another SM. Timing report only.
__global__ void __launch_bounds__(kThreads, 1) HopChainKernel(uint32_t* sync, uint32_t* hop, int rounds) {
  __shared__ uint32_t base, gen0;
  if (threadIdx.x == 0) {
    gen0 = grid::GridGeneration(sync);
    base = grid::LdAcquire(hop);
  }
  __syncthreads();
  grid::GridBarrier(sync, gen0 + 1);
  for (int r = static_cast<int>(blockIdx.x); r < rounds; r += static_cast<int>(gridDim.x)) {
    if (threadIdx.x == 0) {
      while (static_cast<int32_t>(grid::LdAcquire(hop) - (base + static_cast<uint32_t>(r))) < 0) {
      }
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(hop) : "memory");
    }
    __syncthreads();  // the block goes on (a consumer's work would start here)
  }
}

TEST(CudaGridBarrier, OrdersWritesAcrossBlocks) {
  const int sms = CurrentDeviceProps().sms;
  constexpr int kRounds = 50, kLaunches = 3;
  for (int per_sm : {1, 2}) {
    for (bool graph : {false, true}) {
      const int blocks = sms * per_sm;
      Dev<uint32_t> sync(2), slots(blocks), errors(1);
      DS_CUDA_CHECK(cudaMemset(sync.get(), 0, 2 * sizeof(uint32_t)));
      DS_CUDA_CHECK(cudaMemset(errors.get(), 0, sizeof(uint32_t)));
      LaunchRepeated(
          graph, kLaunches,
          [&](cudaStream_t st) {
            DS_CUDA_CHECK(cudaMemsetAsync(slots.get(), 0, blocks * sizeof(uint32_t), st));
            LaunchCooperative(BarrierCheckKernel, dim3(blocks), dim3(kThreads), 0, st, sync.get(), slots.get(), errors.get(),
                              kRounds);
          },
          [] {});
      const std::vector<uint32_t> e = errors.Download(), s = sync.Download();
      std::printf("[metric] op=grid_barrier case=%d_blocks%s rounds=%d launches=%d errors=%u count=%u generation=%u "
                  "(expected 0, 0, %d)%s\n",
                  blocks, graph ? "_graph" : "", kRounds, kLaunches, e[0], s[0], s[1], 2 * kRounds * kLaunches,
                  e[0] == 0 && s[0] == 0 && s[1] == 2u * kRounds * kLaunches ? " PASS" : " FAIL");
      EXPECT_EQ(e[0], 0u) << blocks << " blocks";
      EXPECT_EQ(s[0], 0u);
      EXPECT_EQ(s[1], 2u * kRounds * kLaunches);
    }
  }
}

// Information (disabled; run with --gtest_also_run_disabled_tests): microseconds a barrier, per
// form and grid size.
TEST(CudaGridBarrier, DISABLED_TimingReport) {
  const int sms = CurrentDeviceProps().sms;
  constexpr int kRounds = 64, kLaunches = 20;
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int per_sm : {1, 2}) {
    const int blocks = sms * per_sm;
    Dev<uint32_t> sync(3);
    DS_CUDA_CHECK(cudaMemset(sync.get(), 0, 3 * sizeof(uint32_t)));
    const auto time_us = [&](auto kernel, int rounds) {
      const CapturedGraph g(st, [&] {
        for (int i = 0; i < kLaunches; ++i)
          LaunchCooperative(kernel, dim3(blocks), dim3(kThreads), 0, st, sync.get(), rounds);
      });
      return ReplayUs(g, st, 1, kLaunches);
    };
    const double empty = time_us(BarrierTimeKernel<0>, 0);
    const char* names[3] = {"generation (grid_barrier.cuh)", "generation, relaxed poll + fence", "one counter"};
    const double t[3] = {time_us(BarrierTimeKernel<0>, kRounds), time_us(BarrierTimeKernel<1>, kRounds),
                         time_us(BarrierTimeKernel<2>, kRounds)};
    for (int f = 0; f < 3; ++f)
      std::printf("[metric] op=grid_barrier_timing blocks=%d form=\"%s\": %.3f us a barrier (launch of none %.2f us)\n",
                  blocks, names[f], (t[f] - empty) / kRounds, empty);
    // Point-to-point hops (block r % grid waits for hop r - 1's release): per hop, net of the
    // launch and its one grid barrier.
    Dev<uint32_t> hop(1);
    DS_CUDA_CHECK(cudaMemset(hop.get(), 0, sizeof(uint32_t)));
    const auto hop_us = [&](int rounds) {
      const CapturedGraph g(st, [&] {
        for (int i = 0; i < kLaunches; ++i)
          LaunchCooperative(HopChainKernel, dim3(blocks), dim3(kThreads), 0, st, sync.get(), hop.get(), rounds);
      });
      return ReplayUs(g, st, 1, kLaunches);
    };
    const double h0 = hop_us(0), hops = hop_us(4 * blocks);
    std::printf("[metric] op=grid_hop_timing blocks=%d: %.3f us a hop to another block (launch + one barrier %.2f us)\n",
                blocks, (hops - h0) / (4 * blocks), h0);
  }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace ds::cuda::test
