// The grid barrier of the persistent kernels (grid_barrier.cuh), alone: a cooperative kernel of
// one or two blocks a SM that runs many barriers, each block writing a round stamp into its own
// slot before a barrier and checking every other block's slot after it (a barrier that let a
// block through early, or did not order the stores, shows as mismatches); the 64-bit counter must
// end at launches x kGridEpoch (each launch padded to the next epoch), over direct launches and
// CUDA-graph replays, with one and two blocks a SM on the same counter. A disabled report times a
// barrier (launches of 64 barriers minus launches of none) against the count + generation pair
// used until session 13 (the last arrival resets the count, then bumps the generation) and the
// latency of one point-to-point dependency hop between blocks (HopChainKernel).
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
  __shared__ uint64_t s_base;
  if (threadIdx.x == 0) s_base = grid::GridBase(sync);
  __syncthreads();
  const uint64_t base = s_base, g = gridDim.x;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) slots[blockIdx.x] = static_cast<uint32_t>(r + 1);
    grid::GridBarrier(sync, base + (2 * static_cast<uint64_t>(r) + 1) * g);
    uint32_t bad = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) bad += __ldcg(slots + b) != static_cast<uint32_t>(r + 1);
    if (bad) atomicAdd(errors, bad);
    // Nobody may overwrite a slot for round r + 1 before every block has checked round r.
    grid::GridBarrier(sync, base + (2 * static_cast<uint64_t>(r) + 2) * g, /*final=*/r == rounds - 1);
  }
}

// The count + generation pair used until session 13, for the timing report only: sync[0]
// counts arrivals, sync[1] is the generation; the last arrival resets the count and bumps the
// generation, the others poll it.
__device__ __forceinline__ void BarrierGeneration(uint32_t* sync, uint32_t target_gen) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t old;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(sync) : "memory");
    if (old == gridDim.x - 1) {
      asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(sync) : "memory");
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(sync + 1) : "memory");
    } else {
      while (static_cast<int32_t>(grid::LdAcquire(sync + 1) - target_gen) < 0) {
      }
    }
  }
  __syncthreads();
}

// kForm 0: grid_barrier.cuh on sync[0..1]; 1: the generation pair on sync[2..3].
template <int kForm>
__global__ void __launch_bounds__(kThreads, 1) BarrierTimeKernel(uint32_t* sync, int rounds) {
  __shared__ uint64_t base;
  if (threadIdx.x == 0) base = kForm == 0 ? grid::GridBase(sync) : grid::LdAcquire(sync + 3);
  __syncthreads();
  for (int r = 1; r <= rounds; ++r) {
    if constexpr (kForm == 0) grid::GridBarrier(sync, base + static_cast<uint64_t>(r) * gridDim.x, r == rounds);
    else BarrierGeneration(sync + 2, static_cast<uint32_t>(base) + static_cast<uint32_t>(r));
  }
}

// A chain of dependency hops between blocks (the megakernel design's per-op counters,
// decode_small_batch.md "Next: the batch-1 layer as one kernel"): after one grid barrier (every
// block has read the hop counter's start value), round r belongs to block r % grid, whose thread
// 0 waits until the counter reaches base + r (acquire) and then bumps it (release), so each hop
// crosses to another SM. Timing report only.
__global__ void __launch_bounds__(kThreads, 1) HopChainKernel(uint32_t* sync, uint32_t* hop, int rounds) {
  __shared__ uint32_t base;
  __shared__ uint64_t gbase;
  if (threadIdx.x == 0) {
    gbase = grid::GridBase(sync);
    base = grid::LdAcquire(hop);
  }
  __syncthreads();
  grid::GridBarrier(sync, gbase + gridDim.x, /*final=*/true);
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
      const uint64_t count = (uint64_t{s[1]} << 32) | s[0], expected = uint64_t{kLaunches} * grid::kGridEpoch;
      std::printf("[metric] op=grid_barrier case=%d_blocks%s rounds=%d launches=%d errors=%u counter=%llu "
                  "(expected 0, %llu)%s\n",
                  blocks, graph ? "_graph" : "", kRounds, kLaunches, e[0], (unsigned long long)count,
                  (unsigned long long)expected, e[0] == 0 && count == expected ? " PASS" : " FAIL");
      EXPECT_EQ(e[0], 0u) << blocks << " blocks";
      EXPECT_EQ(count, expected);
    }
  }
}

// Launches of different grid sizes and barrier counts on one counter (the runner's persistent MoE
// kernel may change blocks_per_sm; the timing reports do): each launch's base must still be
// exact, so every barrier orders the stores and the counter ends at launches x kGridEpoch.
TEST(CudaGridBarrier, MixedGridsShareACounter) {
  const int sms = CurrentDeviceProps().sms;
  Dev<uint32_t> sync(2), slots(2 * sms), errors(1);
  DS_CUDA_CHECK(cudaMemset(sync.get(), 0, 2 * sizeof(uint32_t)));
  DS_CUDA_CHECK(cudaMemset(errors.get(), 0, sizeof(uint32_t)));
  const int grids[4] = {sms, 2 * sms, sms, 2 * sms}, rounds[4] = {7, 3, 1, 5};
  for (int i = 0; i < 4; ++i) {
    DS_CUDA_CHECK(cudaMemset(slots.get(), 0, 2 * sms * sizeof(uint32_t)));
    LaunchCooperative(BarrierCheckKernel, dim3(grids[i]), dim3(kThreads), 0, cudaStream_t{nullptr}, sync.get(), slots.get(),
                      errors.get(), rounds[i]);
  }
  const std::vector<uint32_t> e = errors.Download(), s = sync.Download();
  const uint64_t count = (uint64_t{s[1]} << 32) | s[0];
  std::printf("[metric] op=grid_barrier case=mixed_grids errors=%u counter=%llu (expected 0, %llu)\n", e[0],
              (unsigned long long)count, (unsigned long long)(4 * grid::kGridEpoch));
  EXPECT_EQ(e[0], 0u);
  EXPECT_EQ(count, 4 * grid::kGridEpoch);
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
    Dev<uint32_t> sync(4);  // [0..1] grid_barrier.cuh's counter, [2..3] the generation pair
    DS_CUDA_CHECK(cudaMemset(sync.get(), 0, 4 * sizeof(uint32_t)));
    const auto time_us = [&](auto kernel, int rounds) {
      const CapturedGraph g(st, [&] {
        for (int i = 0; i < kLaunches; ++i)
          LaunchCooperative(kernel, dim3(blocks), dim3(kThreads), 0, st, sync.get(), rounds);
      });
      return ReplayUs(g, st, 1, kLaunches);
    };
    const double empty = time_us(BarrierTimeKernel<0>, 0);
    {  // The same empty kernel without the cooperative attribute (session 22: 1.41 against 1.69 us, and no
       // faster decode step with the persistent kernels launched so: session22_2026-12-01_run1).
      const CapturedGraph g(st, [&] {
        for (int i = 0; i < kLaunches; ++i)
          DS_CUDA_CHECK(LaunchWithAttrs(nullptr, 0, BarrierTimeKernel<0>, dim3(blocks), dim3(kThreads), 0, st, sync.get(), 0));
      });
      std::printf("[metric] op=grid_launch_timing blocks=%d: an empty launch in a graph %.2f us cooperative, %.2f us plain\n",
                  blocks, empty, ReplayUs(g, st, 1, kLaunches));
    }
    const char* names[2] = {"one 64-bit counter (grid_barrier.cuh)", "count + generation (until session 13)"};
    const double t[2] = {time_us(BarrierTimeKernel<0>, kRounds), time_us(BarrierTimeKernel<1>, kRounds)};
    for (int f = 0; f < 2; ++f)
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
