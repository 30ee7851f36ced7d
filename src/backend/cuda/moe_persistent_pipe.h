// The pipelined form of MoePersistent (moe_persistent.h, MoePersistentParams::pipelined): one
// block per SM, eight consumer warps and one producer warp. The producer streams every weight the
// block will multiply (its gate_up tiles, then its down tiles) into a ring of shared-memory stages
// with bulk copies (cp.async.bulk, completion on an mbarrier per stage), ahead of the consumers and
// regardless of the grid barriers, so DRAM keeps streaming while the consumers wait at one: the
// shared experts' tiles first (known before the routing); meanwhile the producer warp waits for
// barrier 1 (every block's router columns) and routes the token itself, then streams the routed
// slots' tiles and the down tiles (the latter while the consumers wait at barrier 2). The
// consumers never wait for barrier 1: a tile's act slot follows from its index. Same math and
// phases as the register form (moe_persistent.cu's comment); only the K splits of the sums differ
// (bounded by the same tests).
// Internal to moe_persistent.cu / moe_persistent_pipe.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/moe_persistent.h"

namespace ds::cuda::moe_pipe {

inline constexpr int kConsumerWarps = 8;
inline constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
inline constexpr int kRows = 16;                            // rows a stage holds (one 16-row mma tile)
inline constexpr int kMaxStages = 8;
inline constexpr int64_t kDynSmemBudget = 200 * 1024;       // ring + activations (dynamic shared memory)
inline constexpr int kMaxStageK = 1024;  // default largest stage K

// Ring geometry of a layer's shapes (the same on host and device).
struct Geom {
  int kg = 0, kd = 0;       // K of a gate_up / down stage (divides hidden / I, a multiple of 32, at most
                            // kMaxStageK or MoePersistentParams::pipe_stage_k)
  int rg = 0, rd = 0;       // a stage row's bytes in shared memory (2 K padded to 64 mod 128: the
                            // 16-byte lane reads of rows g and g + 1 fall on different banks)
  int slot = 0, stages = 0; // a stage's bytes (16 rows of the wider kind) and the ring's stages
  int xs = 0, x32 = 0;      // the bf16 activations' and the fp32 input's bytes
  __host__ __device__ int64_t DynSmem() const { return int64_t{slot} * stages + xs + x32; }
  __host__ __device__ bool Ok() const { return kg > 0 && kd > 0 && stages >= 2; }
};

__host__ __device__ inline int StageK(int64_t k, int64_t kmax) {
  for (int64_t n = 1; n * 32 <= k; ++n)
    if (k % n == 0 && (k / n) % 32 == 0 && k / n <= kmax) return static_cast<int>(k / n);
  return 0;
}
__host__ __device__ inline int RowBytes(int k) { return (2 * k) % 128 == 64 ? 2 * k : 2 * k + 64; }
__host__ __device__ inline int64_t Up128(int64_t b) { return (b + 127) / 128 * 128; }

// max_stages > 0 caps the ring's stages, stage_k > 0 sets the largest stage K instead of
// kMaxStageK (measurement: MoePersistentParams::pipe_max_stages / pipe_stage_k).
__host__ __device__ inline Geom MakeGeom(int64_t hidden, int64_t inter, int64_t top_k, int64_t shared_inter,
                                         int max_stages = 0, int stage_k = 0) {
  Geom g;
  const int64_t kmax = stage_k > 0 ? stage_k : kMaxStageK;
  g.kg = StageK(hidden, kmax);
  g.kd = StageK(inter, kmax);
  if (g.kg == 0 || g.kd == 0) return g;
  g.rg = RowBytes(g.kg);
  g.rd = RowBytes(g.kd);
  g.slot = static_cast<int>(Up128(int64_t{kRows} * (g.rg > g.rd ? g.rg : g.rd)));
  const int64_t xe = hidden > top_k * inter + shared_inter ? hidden : top_k * inter + shared_inter;
  g.xs = static_cast<int>(Up128(2 * xe));
  g.x32 = static_cast<int>(Up128(4 * hidden));
  const int64_t ring = kDynSmemBudget - g.xs - g.x32;
  const int64_t st = ring > 0 ? ring / g.slot : 0;
  const int cap = max_stages > 0 && max_stages < kMaxStages ? max_stages : kMaxStages;
  g.stages = static_cast<int>(st > cap ? cap : st);
  return g;
}

// Empty when the pipelined form runs p (beyond MoePersistentUnsupported's shared checks); else why.
// Asks the device once per (device, dynamic shared memory) whether one block fits an SM.
const char* PipeUnsupported(const MoePersistentParams& p);

// The kernel (for attributes such as the shared-memory carveout).
const void* PipeKernel();

// Launches it (cooperative, one block per SM, on p.stream).
void LaunchPipe(const MoePersistentParams& p);

}  // namespace ds::cuda::moe_pipe
