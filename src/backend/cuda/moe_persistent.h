// Persistent MoE layer for one decode token (batch 1): the router, the routing, the routed and
// shared experts, the combine, the residual add and the next RMSNorm in ONE cooperative launch,
// its phases separated by grid-wide barriers instead of kernel boundaries
// (docs/design/decode_small_batch.md, "A persistent MoE phase at batch 1").
//
// Math (DeepSeek-V2 paper section 2.2 / transformers' DeepseekV2MoE and DeepseekV3MoE, as the
// unfused runner path computes it):
//   [attn_out: r1 = residual + attn_out; x32 = rmsnorm(r1) * post_norm_weight; x16 = bf16(x32)]
//   logits[e]   = x32 . router_w[e]                       (fp32)
//   ids, w      = routing(logits)                          (moe_routing.cuh RouteTokenInWarp's bits)
//   act_j[c]    = bf16(silu(g) * u), g = x16 . w13[id_j][c], u = x16 . w13[id_j][I + c]
//   act_s[c]    = the same with the shared experts' gate_up rows c and Is + c
//   shared[n]   = act_s . shared_down[n]                   (fp32, in chunks of I)
//   moe[n]      = shared[n] + sum_j w_j * bf16(act_j . w2[id_j][n])   (MoeCombineNorm's order)
//   residual[n] = r1[n] + moe[n];  out32 = rmsnorm(residual) * norm_weight;  out16 = bf16(out32)
// The dot products run on the tensor cores (bf16 mma, fp32 accumulate) and every sum (the norms'
// sums of squares, the router's, the experts') in this kernel's own order: not the unfused
// kernels' bits, so the runner's test bounds the logits (CudaRunnerPersistentMoe.*); the routing
// of given logits is the warp routing's (RouteTokenInWarp, whatever routing.warp_route says). The
// next norm's sum of squares is summed per block, then over the blocks in a fixed order
// (deterministic).
//
// Phases (grid = one or two blocks per SM, cooperative launch so every block is resident), as
// without router_ready; the runner's default sets router_ready (shared experts' tiles first and
// no barrier 1; since session 20) and the 128-byte L2 fetch size (l2_fetch, session 21): see those
// fields. (Session 20's tail_fold, phase 2's last partial round folded into the one before, was
// removed in session 21, slower once every burst's loads were in flight; code at 7a6fd52.)
//  0. every block: x32 and x16 into shared memory (with attn_out: the post-attention norm);
//  1. router logit columns (blocks b, b + grid, ...) -> barrier;
//  2. every block routes the token itself (warp 0, the same bits everywhere: no barrier; two
//     experts a lane where num_experts <= 64, RouteTokenInWarp<2>), then
//     gate_up + SiLU tiles of 8 act columns (8 gate + the same 8 up rows: one 16-row mma tile,
//     over all of hidden by one warp, or split over gu_ksplit warps of a block), the routed
//     slots' then the shared experts' -> barrier;
//  3. down tiles of 8 output columns, one a block: its warps take pairs of segments (routed slot
//     j; the shared down's chunks of I) split along K, then 8 threads finish moe, the residual and
//     the block's sum of squares (no combine pass, no atomics) -> barrier 3 (none without a next
//     norm, norm_weight == nullptr: barrier 2 is then the final one and the kernel ends here);
//  4. every block sums the partials (a fixed order) and normalises the columns it finished.
// The barrier is grid_barrier.cuh's 64-bit arrival counter in `sync` (zero before the first
// launch; each launch leaves it at the next multiple of grid::kGridEpoch), so the launch can be
// captured into a CUDA graph and replayed, at either blocks_per_sm.
//
// Dense form (session 14): num_experts == top_k == 0 and the layer's MLP as the shared weights
// (shared_gu / shared_down, shared_inter its intermediate size, inter a chunk of it): no router,
// routing or barrier 1; phases 0, 2, 3 (and 4) as above. A first_k_dense_replace layer in one launch.
//
// Supported (MoePersistentUnsupported says why not): bf16 routed and shared experts (no FP8),
// one token, num_experts <= 256, top_k <= 16, hidden and I multiples of 32, the shared
// intermediate size a multiple of I (at most 4 I), at most kMoePersistentMaxTilesPerBlock down
// tiles a block, and blocks_per_sm blocks that fit an SM of a device with cooperative launch.
// Non-finite router logits give NaN outputs, not a fault (an out-of-range id reads expert 0).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/moe_routing.h"

namespace ds::cuda {

struct MoePersistentParams {
  const float* x32 = nullptr;           // [hidden] fp32: the router's input (post-attention norm)
  const __nv_bfloat16* x16 = nullptr;   // [hidden] bf16: the experts' input
  // Or, with attn_out: the kernel applies the post-attention norm itself (every block; x32 / x16
  // unused): x = rmsnorm(residual + attn_out) * post_norm_weight, and the residual it updates is
  // residual + attn_out (the unfused path's residual add, same fp32 operation).
  const float* attn_out = nullptr;          // [hidden] fp32 (o_proj's output) or nullptr
  const float* post_norm_weight = nullptr;  // [hidden] fp32
  const float* router_w = nullptr;      // [E, hidden] fp32
  MoeRoutingParams routing{};           // n = 1; logits / topk_ids / topk_weights as below
  const __nv_bfloat16* w13 = nullptr;   // [E, 2I, hidden] bf16 (gate rows, then up rows)
  const __nv_bfloat16* w2 = nullptr;    // [E, hidden, I] bf16
  const __nv_bfloat16* shared_gu = nullptr;    // [2 Is, hidden] bf16, or nullptr (no shared experts)
  const __nv_bfloat16* shared_down = nullptr;  // [hidden, Is] bf16
  int64_t hidden = 0, num_experts = 0, top_k = 0, inter = 0, shared_inter = 0;
  float* logits = nullptr;              // [E] fp32 scratch (written in phase 1)
  int32_t* topk_ids = nullptr;          // [top_k] written by block 0 (the routing's result)
  float* topk_weights = nullptr;        // [top_k]
  __nv_bfloat16* act = nullptr;         // [top_k * I + Is] bf16 scratch
  float* residual = nullptr;            // [hidden] fp32, updated in place
  const float* norm_weight = nullptr;   // [hidden] fp32: the next RMSNorm's weight. nullptr: no next
                                        // norm (phase 4 and barrier 3 skipped; out32 / out16 / partials
                                        // unused): the next layer's attention kernel normalises the
                                        // residual itself (MlaAttnPersistentParams::in_residual)
  float eps = 1e-6f;
  float* out32 = nullptr;               // [hidden] fp32: the next norm's output
  __nv_bfloat16* out16 = nullptr;       // [hidden] bf16 copy of it (or nullptr)
  uint32_t* sync = nullptr;             // 2 words (one 64-bit counter, 8-byte aligned), zero before the first launch
  float* partials = nullptr;            // [MoePersistentGridBlocks(blocks_per_sm)] fp32 scratch
  cudaStream_t stream = nullptr;
  int blocks_per_sm = 1;                // 1 or 2 (2: registers capped at 128, twice the warps)
  // Phase 2's work split: 1, one gate_up tile (8 gate + 8 up rows over all of hidden) a warp;
  // 2, 4 or 8, each tile's hidden split over that many warps of one block and their sums added
  // in part order (more loads in flight on the SMs with the most tiles, a shorter tail; session
  // 14). At most kMoePersistentMaxGuRounds tiles a slot.
  int gu_ksplit = 1;
  // shared_first (session 20; CudaRunnerOptions::persistent_moe_shared_first): when set, one word,
  // zero before the first launch (each launch leaves it at zero), and gu_ksplit must be 8. Phase
  // 2 then runs the shared experts' tiles first (they need no routing) and there is no barrier 1:
  // the router blocks count their logits written in this word, and a block waits for the count
  // only before its first routed tile (then routes). The shared experts' weights stream while
  // the router runs. The same sums in the same order per tile: the same bits.
  uint32_t* router_ready = nullptr;
  // Measurement only (tests): thread 0 of block b writes %globaltimer (ns; one clock for every SM,
  // so the blocks' stamps line up; clock64() cycles until session 22) to stamps[b * kMoePersistentStamps
  // + i] at: start, phase 1 done, barrier 1 passed (router_ready: at 1), phase 2 done, barrier 2 passed, phase 3 done,
  // barrier 3 passed, end (without a next norm, 5-7 all at phase 3's end; dense: 1 and 2
  // together). barriers_only skips every phase's work (the launch and barriers' cost).
  long long* stamps = nullptr;
  // Measurement only (tests): thread 0 of block b writes %globaltimer (ns) to tile_stamps[b *
  // kMoePersistentTileStamps + i]: i = 0 before its routing, 1 after the wait for the router's
  // count, 2 after warp 0's routing, 3 after the routing's end, 4 + r after its part of phase-2
  // round r (r < kMoePersistentTileStamps - 4).
  long long* tile_stamps = nullptr;
  bool barriers_only = false;
  // The weight loads' L2 fetch size: 0 none; 1 ".L2::128B" (the runner's default since session
  // 21); 2 ".L2::256B" (ptx::LdStreamPf; a separate instantiation each; a PDL launch uses none).
  // The same bits. (Session 28's 3, 128 bytes with an L2 evict_first policy, was no faster and
  // was removed; code at cba7968.)
  int l2_fetch = 0;
  // The kernel's preferred shared-memory carveout in percent (SetSmemCarveout; session 25,
  // CudaRunnerOptions::persistent_carveout), applied where the kernel's blocks fit it; negative:
  // the driver's choice. Timing only (a launch attribute: the same bits).
  int carveout = -1;
  // Launched as a programmatic dependent of the previous kernel (launch.cuh; a separate kernel
  // instantiation that waits for it first). Bit-identical and no faster (session 15 run 1).
  bool pdl = false;
  // Session 28: where the params are the runner's form (MoePersistentSpecialized), launch the
  // instantiation with that form fixed at compile time: 1; 2, also V2-Lite's shapes fixed where
  // they are those; 0: the generic one. The same bits.
  int specialize = 2;
  // router_tagged (session 31; CudaRunnerOptions::moe_router_tagged): [num_experts] 64-bit words,
  // zero before the first launch (8-byte aligned), paired with one `sync` counter: zero both
  // together, never `sync` alone (the tags follow its launch count). Used where the specialised kernel runs
  // (MoePersistentSpecialized, num_experts <= 64; other launches ignore it): each router block
  // also writes its logit as one word, (this launch's tag << 32) | its fp32 bits (the tag is the
  // launch's grid-barrier base / kGridEpoch + 1: it differs from the previous launch's, and every
  // launch rewrites every word), and warp 0 of every block polls those
  // words (relaxed loads: a value arrives with its own tag) instead of waiting for router_ready's
  // count and then loading the logits; its first loads go out beside the block's last shared-expert
  // tile, so they land while its weights stream. The same logits: the same routing bits.
  uint64_t* router_tagged = nullptr;
};
inline constexpr int kMoePersistentStamps = 8;
inline constexpr int kMoePersistentTileStamps = 16;

// Down tiles (8 output columns each) one block may finish (the kernel keeps their residuals in
// shared memory for the norm).
inline constexpr int kMoePersistentMaxTilesPerBlock = 8;
// gu_ksplit > 1: rounds of phase 2 (tiles a (block, slot)) at most.
inline constexpr int kMoePersistentMaxGuRounds = 16;
// Shared experts' down chunks (shared_inter / inter) at most.
inline constexpr int kMoePersistentMaxSharedChunks = 4;

// Blocks of the launch: blocks_per_sm per SM of the current device.
int MoePersistentGridBlocks(int blocks_per_sm);

// Whether MoePersistent launches the specialised instantiation for these params: `specialize` and
// the runner's form (l2_fetch 1, blocks_per_sm 2, gu_ksplit 8, top_k > 0, attn_out, router_ready,
// no norm_weight, no stamps or tile_stamps, not barriers_only, not pdl).
bool MoePersistentSpecialized(const MoePersistentParams& p);
// Whether MoePersistent runs the specialised kernel's router_tagged form for these params
// (MoePersistentSpecialized, router_tagged set, num_experts <= 64; a PDL launch takes the generic
// kernel instead). The same bits either way.
bool MoePersistentTagged(const MoePersistentParams& p);

// The largest gate_up split <= wanted (1, 2, 4 or 8) that p's shapes allow at p.blocks_per_sm:
// hidden a multiple of 32 x the split, at most kMoePersistentMaxGuRounds rounds.
int MoePersistentGuKsplitFor(const MoePersistentParams& p, int wanted);

// Empty when MoePersistent(p) can run p; else the reason (for the runner's fallback and tests).
std::string MoePersistentUnsupported(const MoePersistentParams& p);

// Launches the kernel (cooperative, on p.stream). DS_CHECKs MoePersistentUnsupported(p).empty().
// Returns whether it went out as a PDL launch (p.pdl, and the device took it).
bool MoePersistent(const MoePersistentParams& p);

// Whether a persistent kernel's PDL launch (MoePersistentParams::pdl, MlaAttnPersistentParams::pdl)
// was refused in this process: from then on they launch plain.
bool PersistentPdlRefused();

}  // namespace ds::cuda
