// Grouped FP8 GEMV for the MoE routed experts at decode sizes (CudaRunnerOptions::
// fp8_gemv_experts, on by default for passes of 2-8 tokens since session 8; first H200 run in
// session 7 run 11, V3 gate_up 1.27x SkinnyGemm at 8 experts x 1 row; with bf16 weights
// (w_bf16, gemv_experts_bf16, since session 8; the runner's default from 8 tokens since session
// 9)): the experts a
// decode step touches, streamed with Fp8Gemv's TMA ring (fp8_gemv.h) instead of SkinnyGemm's
// grouped form (skinny_gemm.h, ~0.77 of copy bandwidth on V3's experts; Fp8Gemv reaches
// 0.81-0.92 on the dense projections).
//
//   for each group e < E and each row r in [offsets[e], offsets[e+1]):
//     out[r, n] = sum_k a[r, k] * w[e, n, k] * s[e, n / 128, k / 128]      n < N, k < K
//
// The semantics of SkinnyGemm's grouped form (GroupedGemmParams with device offsets): a: bf16
// [max_rows, K], row stride lda (elements; the rows of group e are offsets[e] .. offsets[e+1]-1,
// any order of groups, no padding); w: e4m3 (OCP e4m3fn) [E, N, K] (expert e's [N, K] at
// w + e * N * K bytes); s: fp32 [E, ceil(N/128), ceil(K/128)] 128x128 block scales; out: fp32
// (or bf16 with out_bf16) [max_rows, N], row stride ldo (elements): only the rows of non-empty
// groups are written. offsets: device int32 [E + 1], non-decreasing prefix sums, offsets[E] <=
// max_rows; the host knows only the bounds max_active_groups (non-empty groups; MoE decode:
// min(E, tokens * top_k)) and max_group_rows (rows of any group, <= 8: a token picks an expert
// at most once and a decode batch here has <= 8 tokens). Groups past the max_active_groups-th
// non-empty one and rows past a group's 8th are not computed (the bounds are the caller's
// contract, as for SkinnyGemm's slots). The same math as Fp8Gemv and SkinnyGemm: e4m3 widened
// to bf16 exactly, bf16 activations, exact products in fp32 (bf16 MMA), fp32 sums, the block
// scale applied to each 128-k block's partial in fp32; only the fp32 summation order differs.
//
// Kernel (fp8_gemv_grouped.cu), the TMA path: Fp8Gemv's units of 128 weight rows x 128 k (one
// scale block), here per (active group slot j, tile t of expert e_j, k block): slot j is the
// j-th non-empty group, found on the device (every CTA scans offsets once with all its threads
// and keeps the slot -> group table in shared memory; no host synchronisation). The unit space
// is slot-major (all units of slot 0's tile 0, then its tile 1, ..., then slot 1) and counts
// only the non-empty groups, n_active (also counted on the device), so the persistent grid of C
// CTAs splits n_active x tiles x ceil(K/128) units into balanced contiguous ranges (CTA c takes
// [c U / C, (c + 1) U / C)); with fewer units than CTAs the extra CTAs exit. Weights come
// through a 2-D tensor map over [E * N, K] (expert e's tile t at row e * N + 128 t; the box of a
// last tile with N % 128 != 0 reads the next expert's first rows, whose outputs are never
// written); activations through a 2-D map over all max_rows rows of `a`, the group's first row
// offsets[e] given as the TMA row coordinate at issue time (two 8-row x 64-k boxes per unit;
// rows past max_rows are zero-filled, rows past the group's end are other groups' rows: each MMA
// output column depends only on its own activation row, so those columns are computed and
// dropped, never written). The producer passes each unit's (first row, rows) to the consumers
// through the stage (a shared-memory word released by its full-barrier arrival). Split tiles:
// per-(slot, tile, consumer warp) counters + per-CTA partials, the last arriver sums in CTA
// order (= k order) and resets the counter, as Fp8Gemv: deterministic for given inputs, safe
// inside CUDA graph capture. A group's bits depend on where the CTA boundaries cut its tiles,
// i.e. on n_active, its slot and C (not on the other groups' values): replays of the same
// offsets are bitwise equal, a batch and its padded graph bucket agree within fp32 rounding.
// Shared memory: Fp8Gemv's ring plus a 2 KB slot table (114.9 KB per CTA with the runtime's 1 KB:
// 2 CTAs fit in the H200's 228 KB per SM). ptxas: 74 registers, no spills.
//
// BF16 weights (w_bf16; CudaRunnerOptions::gemv_experts_bf16, on from 8 tokens; tests pass on the
// H200, session 8 run 3: V2-Lite gate_up at 6 experts 0.89 of copy with one CTA per SM, down 0.61;
// for DeepSeek-V2-Lite's bf16 experts, where SkinnyGemm's grouped form
// reaches 0.64-0.77 of copy bandwidth): the same kernel, a template on the weight type, with
//
//   out[r, n] = sum_k a[r, k] * w[e, n, k]       w: bf16 [E, N, K], no scales (w_scales ignored)
//
// A unit is still 128 weight rows x 128 bytes of k, here 64 k of bf16 (units per tile
// ceil(K/64)), with one 8-row x 64-k activation box (17 KB stages; the ring, the slot table, the
// split-tile sums, the workspace rules and the determinism as above). The consumers read the
// stage's bf16 straight into the m16n8k16 bf16 MMA's A fragments (the weights; no widening, no
// block scale), the activations as B, fp32 accumulators carried across the units (the lane
// layout: StageMmaBf16 in fp8_gemv_common.cuh). Math: exact bf16 x bf16 products in fp32, fp32
// sums, as SkinnyGemm's bf16 path; only the summation order differs. The TMA path needs K % 8 ==
// 0 (the weights' 16-byte row pitch) instead of K % 16; k >= K of a last unit is zero-filled in
// weights and activations. The generic path as below (fp32 FMAs, per-128-k partials added).
// Shared memory 108.8 KB per CTA with the runtime's 1 KB (2 CTAs per SM); ptxas (nvcc 13.0):
// 75 registers, no spills. The e4m3 instances' PTX is unchanged by the template.
//
// The generic path (K % 16 != 0 (bf16: K % 8 != 0), lda % 8 != 0, a or w not 16-byte aligned, E * N >= 2^31, E > 65536,
// max_active_groups > kFp8GemvGroupedMaxSlots, or a device other than compute capability 9.0):
// one block per (8 weight rows, slot), the slot's group found by a block scan, a warp per weight
// row, per-128-k partials times the scale, fp32 CUDA-core FMAs; correct but slow.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// Rows of one group that a launch computes (max_group_rows <= this).
inline constexpr int64_t kFp8GemvGroupedMaxRows = 8;
// Largest max_active_groups (after the cap at E) the TMA path takes (its shared slot table).
inline constexpr int64_t kFp8GemvGroupedMaxSlots = 1024;

struct Fp8GemvGroupedParams {
  const __nv_bfloat16* a = nullptr;  // [max_rows, K] bf16, row stride lda (elements, >= K)
  int64_t lda = 0;
  // Gathered rows (groups of one row only: max_group_rows <= 1; the MoE decode step of one token
  // after MoeRouterRoute): group e's row offsets[e] reads a + a_rows[offsets[e]] * lda, and `a`
  // holds a_src_rows rows (the TMA map's extent). nullptr: no gather. Verified on the H200
  // (session 10 run 1: bit-identical to the permuted copy); the runner does not use it (V2-Lite's
  // batch-1 gate_up on the GEMV this way measured 4% slower than SkinnyGemm's gathered rows).
  const int32_t* a_rows = nullptr;
  int64_t a_src_rows = 0;
  int64_t max_rows = 0;              // rows allocated in a and out (>= offsets[E])
  const int32_t* offsets = nullptr;  // [E + 1] device, prefix sums of the group sizes
  const void* w = nullptr;           // [E, N, K] e4m3 (bf16 with w_bf16), row-major
  const float* w_scales = nullptr;   // [E, ceil(N/128), ceil(K/128)] fp32 (e4m3 only; ignored with w_bf16)
  bool w_bf16 = false;               // bf16 weights, no scales (see above)
  void* out = nullptr;               // [max_rows, N] fp32 (bf16 with out_bf16), row stride ldo (elements, >= N)
  bool out_bf16 = false;
  int64_t ldo = 0;
  int64_t num_experts = 0, N = 0, K = 0;  // E, N, K >= 1
  // Host-side bounds: non-empty groups (0 = E; capped at E) and rows of any group (0..8).
  int64_t max_active_groups = 0;
  int64_t max_group_rows = kFp8GemvGroupedMaxRows;
  // TMA path: Fp8GemvGroupedWorkspaceBytes(E, N, K, ctas, w_bf16) bytes of device memory,
  // 16-byte aligned, zeroed once before the first use (the kernel leaves its counters zero). Its
  // layout depends on (E, N, K, w_bf16) only, so one workspace serves any sequence of launches
  // with those dims (any offsets, bounds or CTA counts) on one stream; concurrent launches need
  // their own.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh)
  // CTAs of the TMA path: 0 = SMs x resident CTAs per SM (capped at units / 2, >= 1), > 0 = that
  // many (capped at the units); units = slots x tiles x ceil(K/128) (bf16: ceil(K/64)), slots =
  // the capped max_active_groups. Changes the split-K sum order only.
  int ctas = 0;
};

// How Fp8GemvGrouped runs these params: the TMA path or the generic one, the slots (capped
// max_active_groups), 128-row tiles per expert, units (slots x tiles x k blocks: an upper bound,
// the kernel uses only the non-empty groups'), CTAs, and the workspace the TMA path needs (0 for
// the generic path; independent of max_active_groups).
struct Fp8GemvGroupedPlan {
  bool tma = false;
  int64_t slots = 0, tiles = 0, units = 0, ctas = 0;
  size_t workspace_bytes = 0;
};
// Errors: CheckError on a bad shape (E, N or K < 1, N or K >= 2^31, max_rows < 0, lda < K, ldo
// < N, max_active_groups < 0, max_group_rows outside 0..8).
Fp8GemvGroupedPlan Fp8GemvGroupedPlanFor(const Fp8GemvGroupedParams& p);

// Workspace bytes of the TMA path for E experts of N x K weights (e4m3, or bf16 with w_bf16) on
// the current device, enough for any max_active_groups <= E (independent of the pointers and the
// offsets, so a caller can size it before a graph capture): per-(slot, tile, warp) counters for
// E slots plus 8 KB of partials per CTA (the CTA count of `ctas` at max_active_groups = E).
// Errors: CheckError if E, N or K < 1.
size_t Fp8GemvGroupedWorkspaceBytes(int64_t E, int64_t N, int64_t K, int ctas = 0, bool w_bf16 = false);

// Launches the grouped GEMV on p.stream (nothing when max_rows, max_group_rows or the slots are
// 0). Does not synchronise. Errors: CheckError on a bad shape or null pointers (a, offsets, w,
// w_scales unless w_bf16, out), on a TMA-path launch without enough workspace (or a workspace not 16-byte
// aligned), and on CUDA errors (launch configuration).
void Fp8GemvGrouped(const Fp8GemvGroupedParams& p);

}  // namespace ds::cuda
