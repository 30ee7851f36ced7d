// The batch-1 MLA attention layer in ONE cooperative launch (CudaRunnerOptions::attn_persistent,
// on by default since session 13; docs/design/decode_small_batch.md, "Next: the batch-1 layer as
// one kernel", step 1): from the input norm's bf16 output x (or, with in_residual, from the
// residual stream: the input norm in every block, session 14) to o_proj's fp32 output, for one
// decode token of one sequence, with the phases separated by grid-wide barriers
// (grid_barrier.cuh) or counters instead of the seven launches of the unfused path (q_proj,
// kv_a, kv norm + RoPE + cache write, the q absorption, the split-KV decode, the merge + W_UV,
// o_proj). Since session 20 the runner's default (nope_ready, split_ready) replaces barriers 1
// and 2 by counters: see those fields.
//
// Math (DeepSeek-V2 paper section 2.1 / transformers' DeepseekV2Attention, absorbed form; the
// runner's unfused path computes the same):
//   q[h]      = x W_q[h]                    [192] fp32 (no q_lora: V2-Lite)
//   kv_a      = x W_kva                     [576] = c_kv [512] | k_pe [64]
//   cache row = bf16(rmsnorm(c_kv) * w_kvnorm) | bf16(rope(k_pe))   (at the token's slot)
//   q_pe[h]   = rope(q[h][128:])            (rotated into phase 3's Q tile; q32 keeps it raw)
//   q_lat[h]  = bf16(bf16(q[h][:128]) W_UK[h])           [512]
//   s[h][j]   = ([q_lat[h] | bf16(q_pe[h])] . cache[j]) * softmax_scale, j < context
//   o_lat[h]  = softmax(s[h]) . cache[:, :512]           (split-KV over 32-key chunks, merged
//               with their log-sum-exps)
//   o[h]      = bf16(bf16(o_lat[h]) W_UV[h]^T)           [128]
//   out       = o W_o^T                                  [hidden] fp32
// The dot products run on the tensor cores (bf16 mma, fp32 accumulate) in this kernel's own
// orders: not the unfused kernels' bits; tests bound it (CudaMlaAttnPersistent.*,
// CudaRunnerAttnPersistent.*).
//
// Phases (grid = one block of 256 threads per SM, cooperative launch), as without nope_ready /
// split_ready; with them, phase 2 overlaps phase 1's q_pe / kv_a tiles and phase 3 starts on a
// counter (the fields below). Where a phase reads weights, the block's first unit is loaded
// before the barrier ahead of it (latency off the critical path;
// bench/results/session13_2026-11-30_run{2..10} measured the variants):
//  1. q and kv_a: 16-row tiles of [W_q; W_kva] (tile t on block t % grid), each tile's K split
//     over the block's 8 warps and summed in warp order; each warp's first W_UK tile into
//     registers -> barrier;
//  2. the absorption, one 16-row tile of W_UK^T a warp (blocks >= 1); each block's first split's
//     cache rows (but the new token's) by cp.async -> barrier;
//  3. split-KV decode: 32-key splits (split s on block s % grid), all heads in one 16-row mma
//     tile (the row-tile kernel's math: mla_decode_tc.cu), q_pe rotated into the Q tile; the new
//     token's split's block first computes the kv norm + k_pe RoPE into its K tile and the cache
//     row; each block's first W_UV rows into registers -> barrier;
//  4. merge + W_UV: (head, 16-row part) units (the merge's weights in shared memory, 16 partial
//     loads in flight a thread) -> barrier; the block's first o_proj tile is staged in shared
//     memory by bulk copies in phase 3 or 4 (wo_stage_point);
//     (merge_cols, head_ready: each unit merges a 64-column slice of its head, 16 groups of 16
//     threads with 8 partial loads in flight a thread, then W_UV once the head's 8 slices are in)
//  5. o_proj: 16-row tiles of W_o as phase 1.
// Supported (MlaAttnPersistentUnsupported says why not): nope 128, rope 64, v 128, kv_lora 512
// (V2 / V2-Lite / V3 MLA dims), 1 <= heads <= 16 and even, hidden a multiple of 256 up to 8192,
// cache pages of 64 tokens, bf16 weights, a device with cooperative launch; contexts up to
// kMlaAttnPersistentMaxContext keys (phase 4 keeps every split's weight in shared memory).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace ds::cuda {

struct MlaAttnPersistentParams {
  const __nv_bfloat16* x16 = nullptr;   // [hidden] bf16: the input norm's output
  // Or (x16 unused): the layer's input norm computed by every block from the residual stream,
  // x = bf16(rmsnorm(in_residual) * in_norm_w) with RmsNorm's per-element fp32 operations (the
  // sum of squares in the kernel's own order), so the MoE kernel before it needs no grid barrier
  // and norm phase of its own (MoePersistentParams::norm_weight == nullptr; session 14).
  const float* in_residual = nullptr;   // [hidden] fp32
  const float* in_norm_w = nullptr;     // [hidden] fp32 (input_layernorm)
  float in_eps = 1e-6f;
  int64_t hidden = 0, heads = 0;
  const __nv_bfloat16* wq = nullptr;    // [heads * 192, hidden] (q_proj)
  const __nv_bfloat16* wkva = nullptr;  // [576, hidden] (kv_a_proj_with_mqa)
  const float* kva_norm_w = nullptr;    // [512] (kv_a_layernorm)
  float eps = 1e-6f;
  const __nv_bfloat16* w_uk_t = nullptr;  // [heads, 512, 128]: W_UK_h^T
  const __nv_bfloat16* kv_b = nullptr;    // [heads * 256, 512]: rows h * 256 + 128 + v are W_UV_h's
  const __nv_bfloat16* wo = nullptr;      // [hidden, heads * 128] (o_proj)
  const int32_t* position = nullptr;      // [1] the token's position (device)
  const float* cos = nullptr;             // [max_pos, 32]
  const float* sin = nullptr;
  int64_t max_pos = 0;
  bool interleave = true;
  __nv_bfloat16* cache = nullptr;         // [slots, 576] this layer's paged latent cache
  const int64_t* slot = nullptr;          // [1] the token's cache slot (device; < 0: no row written). Must be key
                                          // context_len - 1's slot (the token's own): its split's block writes it
  const int32_t* block_table = nullptr;   // [>= ceil(context / 64)] the sequence's pages (device)
  const int32_t* context_len = nullptr;   // [1] keys to attend, the new token included (device)
  int64_t block_size = 64;
  float softmax_scale = 1.f;
  int64_t max_context = 0;                // the workspace's capacity in keys
  float* q32 = nullptr;                   // [heads * 192] scratch
  float* kva32 = nullptr;                 // [576] scratch
  __nv_bfloat16* qlat16 = nullptr;        // [heads, 512] scratch
  float* workspace = nullptr;             // [MlaAttnPersistentWorkspaceFloats(heads, max_context)]
  __nv_bfloat16* o16 = nullptr;           // [heads * 128] scratch (o_proj's input)
  float* out = nullptr;                   // [hidden] fp32: o_proj's output
  uint32_t* sync = nullptr;               // 2 words (grid_barrier.cuh's 64-bit counter), zero before the first launch
  // absorb_overlap (session 20; CudaRunnerOptions::attn_absorb_overlap): when set, one word, zero
  // before the first launch (each launch leaves it at zero). Phase 1 then runs its tiles in the
  // order q_nope of every head, q_pe, kv_a; each q_nope tile bumps this counter (release), and
  // phase 2's absorption runs on the blocks with the fewest phase-1 tiles as soon as the counter
  // reaches heads x 8, while the other blocks still stream their q_pe / kv_a tiles. Barrier 1
  // goes (three grid barriers instead of four). nullptr: the phases as listed above.
  uint32_t* nope_ready = nullptr;
  // split_counter (session 20; CudaRunnerOptions::attn_split_counter): with nope_ready, one more
  // word, zero before the first launch (each launch leaves it at zero). Barrier 2 goes too: each
  // q_pe / kv_a tile and each absorbing block bumps it, and a block with a decode split (and the kv-norm block) waits
  // for the full count before its Q tile; the other blocks go on to barrier 3.
  uint32_t* split_ready = nullptr;
  // merge_cols (session 29; CudaRunnerOptions::attn_merge_cols_min_splits): with head_ready set
  // ([heads] words, zero before the first launch; each launch leaves them at zero) and a launch's
  // context at >= merge_cols_min_splits 32-key splits (0: never), phase 4 merges in two loops. A
  // (head, part) unit merges only its 64-column slice of the head's latent (part x 64 .. + 63)
  // over every split, writes it into split 0's partial in place and bumps the head's word
  // (release); then each unit waits for its head's 8 slices and applies W_UV to the merged row.
  // The L2 reads of the partials are 1 / 8 of the one-loop merge's (every unit of a head reads the
  // whole head there: 32 MB at 4K), for one more wait. Its own fp32 summation order (16 groups of
  // splits, added in group order): not the one-loop merge's bits.
  uint32_t* head_ready = nullptr;
  int merge_cols_min_splits = 0;
  cudaStream_t stream = nullptr;
  // Optional, for timing reports (CudaMlaAttnPersistent.DISABLED_TimingReport): when set, thread 0
  // of each block writes %globaltimer (ns) at kMlaAttnPersistentStamps points, [grid, stamps],
  // in order: 0 start; 1 phase 1 done; 2 barrier 1 (absorb_overlap: the q_nope counter reached, on the
  // absorbing blocks; at 1 elsewhere); 3 phase 2 done; 4 barrier 2; 5 phase 3's first
  // Q / K tiles in shared memory; 6 phase 3 done; 7 barrier 3; phase 4's first unit: 8 LSEs
  // loaded, 9 weights, 10 partials summed, 11 merged (merge_cols: its slice written and counted); 12 phase 4's units done; 13 phase 4 done
  // (with wo_stage_point 0-2: the o_proj tile's copies issued); 14 barrier 4; 15 phase 5 done (a
  // block without a split or a unit stamps those sub-steps at the step's start or end); inside
  // phase 1 (session 25): 16 the position read (thread 0, after the barrier base), 17 x in shared
  // memory (the input norm done), 18 the block's first phase-1 tile written; inside a split block's
  // first decode (session 28; 0 on a block without a split): 19 the scores summed over the warps,
  // 20 P V done (after a block barrier), 21 the partials and LSEs written (after one).
  uint64_t* phase_ns = nullptr;
  // Measurement only (the timing report): every block returns right after phase 1 (stamp 1), so
  // that phase 1 can be timed without the later phases running beside it. Nothing past q32 / kva32
  // is written and the barrier and counter words are left mid-launch: the caller resets them.
  bool debug_stop_after_p1 = false;
  // When the bulk copies of the block's first o_proj tile go out. In phase 4: 0 at its start, 1
  // after the first unit's LSE loads, 2 (this struct's default: session 13 run 9, 27.7 us against
  // 28.4 at point 0) after its partials' loads; in phase 3 (session 22,
  // CudaRunnerOptions::attn_wo_stage_point): 3, blocks without a decode split at its start and
  // the split blocks once their first Q / K tiles are in shared memory; 4, every block at its
  // start (no faster); 5, as 3 but a split block's 16 copies issued by its 8 warps' lane 0 (two
  // rows each; thread 0 announces the bytes) instead of thread 0 alone (~90 ns a copy); 6, as 5
  // but a split block's copies after its decode (session 28). The same bits. (This struct's
  // default stays 2 for the op tests; the runner passes 3.)
  int wo_stage_point = 2;
  // Session 28: where the params are the runner's form (MlaAttnPersistentSpecialized), launch an
  // instantiation with that form fixed at compile time (no code for the other forms on its path):
  // 1; 2, also 16 heads and hidden 2048 fixed where they are those (V2-Lite, Moonlight); 0, the
  // generic one. The same bits (CudaRunnerAttnPersistent.SpecializeBitIdentical).
  int specialize = 2;
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
};

inline constexpr int kMlaAttnPersistentStamps = 22;

// Contexts the runner sends it (attn_persistent; the kernel's limit too: phase 4's shared-memory
// weights): the decode phase runs its splits one after another on each block and every (head,
// part) unit merges all of its head's splits, so long contexts stay on the unfused path's
// split-KV kernels.
inline constexpr int64_t kMlaAttnPersistentMaxContext = 8192;

// Floats of the split-KV workspace for `max_context` keys: partials [heads, splits, 512] and
// their log-sum-exps [heads, splits], splits = ceil(max_context / 32).
int64_t MlaAttnPersistentWorkspaceFloats(int64_t heads, int64_t max_context);

// Empty when MlaAttnPersistent(p) runs p; else the reason.
std::string MlaAttnPersistentUnsupported(const MlaAttnPersistentParams& p);

// Whether MlaAttnPersistent launches a specialised instantiation for these params: `specialize`
// > 0 and the runner's form (l2_fetch 1, wo_stage_point 3, nope_ready, split_ready,
// in_residual, head_ready with merge_cols_min_splits 1 (session 35), no phase_ns, no
// debug_stop_after_p1, not pdl). The same bits as the generic one.
bool MlaAttnPersistentSpecialized(const MlaAttnPersistentParams& p);

// Launches it (cooperative, one block per SM, on p.stream). DS_CHECKs MlaAttnPersistentUnsupported(p).empty().
// Returns whether it went out as a PDL launch (p.pdl, and the device took it;
// moe_persistent.h's PersistentPdlRefused says when it was refused).
bool MlaAttnPersistent(const MlaAttnPersistentParams& p);

}  // namespace ds::cuda
