// Decode-size ("skinny") grouped GEMM: few rows per group, so the cost is streaming the
// weights. Same math and layout as GroupedGemm (grouped_gemm.h): for each group e and each row
// r in [offsets[e], offsets[e+1]):  out[r, :] = a[r, :] @ w[e]^T,  w[e]: [N, K] bf16, or FP8
// e4m3 with 128x128 block scales w_scales[e, n / 128, k / 128]; fp32 accumulation.
// Batched form (offsets == nullptr, num_experts = G > 1, e.g. the per-head GEMMs of absorbed
// MLA): every group has max_rows rows t and reads a + e * group_stride_a + t * lda, writes
// out + e * group_stride_out + t * ldo, with weights w + e * group_stride_w.
//
// Kernel (skinny_gemm.cu): one block per (16 or 32 weight rows, group[, K split]); its warps
// split K and stream the weight rows with 16-byte loads (8 bf16 / 16 fp8 per lane, several
// loads per row in flight), the group's activation rows come through L1 (shared by the blocks
// of one group), and the products run on tensor cores with the weights as the 16-row operand
// (mma m16n8k16, "swap AB": the rows of `a` are the 8-wide side, 8 or 16 per pass; more rows
// loop, re-reading the weights, mostly from L2). FP8 weights are widened to bf16 exactly (bit
// shifts + a 2^120 multiply); activations stay bf16, so no activation quantisation error is
// added; the FP8 block scale multiplies each 64-k partial in fp32.
//
// Split-K (narrow weights: too few row tiles to fill the GPU): blockIdx.z takes a contiguous
// range of K chunks; each split writes its fp32 partial to a caller-provided workspace, and the
// last split block of a tile (a per-tile device counter, which that block resets to 0) sums
// the partials in split order 0..S-1 and writes the output. One launch, deterministic (the sum
// order never depends on scheduling), safe inside CUDA graph capture; the counters must be
// zero before the first call (the kernel leaves them zero). Split-K and the batched form run a
// second kernel (SkinnyGemmKernelGen); MoE and unsplit dense GEMMs keep the plain kernel, whose
// register-capped variants lost 6-33% with the general form's registers.
//
// Segments need no padding (any offsets work; the runner permutes with row_align 1 for this
// kernel). Empty groups cost one early-exiting block per grid slot: the grid has
// max_active_groups slots and block j finds the j-th non-empty group from the device offsets
// (no host synchronisation; safe inside CUDA graph capture).
#pragma once

#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/moe_combine_norm.h"

namespace ds::cuda {

// Dispatch thresholds (measured on the H200, bench/results/skinny_gemm_2026-11-29.md and
// splitk_2026-11-29.md): the runner uses the skinny kernel for MoE layers when tokens * top_k
// <= kSkinnyMoeMaxAvgRows * n_experts (<= 8 rows per expert on average; the big-tile kernel
// reads each expert once per 64 rows at ~0.2 of HBM bandwidth, this one once per 16 rows at
// ~0.6-0.8), for FP8 dense projections (in-kernel dequantisation path) when SkinnyDenseFp8(M, N)
// (host_plans.h), and for bf16 dense projections instead of cuBLASLt when M <= kSkinnyBf16MaxRows and
// N * K <= kSkinnyBf16MaxWeights (cuBLASLt streams large bf16 matrices as fast or faster; the
// skinny kernel wins on small ones such as kv_a_proj). CudaRunnerOptions::skinny_bf16_max_weights
// overrides it: at 12 Mi (V2-Lite's q 3072 x 2048 and shared experts' gate_up 5632 x 2048 / down
// 2048 x 2816 on SkinnyGemm too) the 27-layer decode step measured 1.1-1.8% faster at batch 1,
// 2.1% at 4, 0.7% at 8, the same at 16 (session 10 run 8); as the default it moved
// CudaRunnerFusedUv.DummyV2LiteWithinBounds (fused_uv on vs off) past its bounds (max relative
// L2 1.7e-2 against 4.3e-3 at 4 Mi; runs 9 and 10), not yet explained, so the default stays 4 Mi.
inline constexpr int64_t kSkinnyMoeMaxAvgRows = 8;
inline constexpr int64_t kSkinnyBf16MaxRows = 16;
inline constexpr int64_t kSkinnyBf16MaxWeights = int64_t{2048} * 2048;
// FP8 dense: SkinnyDenseFp8(M, N) and its measured thresholds are in host_plans.h (CPU-tested).
// Absorbed-MLA per-head GEMMs (q_nope W_UK, o_lat W_UV^T; bf16 weights, batched over heads):
// the skinny kernel replaces cuBLAS's strided-batched GEMM when the decode tokens <= this.
// 0 = never: measured slower at every size (V3, 128 heads: W_UK 9.4 vs 6.5 us at 1 token,
// 37 vs 9.3 at 64; W_UV 7.2 vs 6.3, 20 vs 7.2; cuBLAS streams them at 0.6-0.7 of the copy
// ceiling), so HeadGemm keeps cuBLAS; the batched form stays available and tested.
inline constexpr int64_t kSkinnyHeadMaxRows = 0;

// The MoE combine + residual + next RMSNorm as the grouped GEMM's epilogue (the routed experts'
// down projection at decode sizes; CudaRunnerOptions::fused_down_combine): every block counts
// itself out on `counter` (one uint32, zero before the first launch; left zero; one fence per
// block), and the last one runs MoeCombineNorm(cn) for cn.n tokens in turn
// (moe_combine_norm.cuh: the same bits as the kernel, for any block size), reading the GEMM's
// output (cn.y) through L2. The plain kernel only (no K split, not the batched form), cn.y the
// GEMM's bf16 output, norm::RmsNormThreads(cn.d) a multiple of the variant's threads at most 8
// times them, and rows of at most 8 elements a thread (V2-Lite's 2,048 over 256 threads; V3's
// 7,168 would be 56 dependent L2 round trips a thread). One launch fewer on the decode chain;
// the combine runs on one block, so it suits a token or two. Norm only (cn.top_k = 0, cn.base the GEMM's fp32 output, cn.residual set): the
// residual add + RMSNorm after a dense projection (CudaRunnerOptions::fused_oproj_norm), the
// bits of RmsNorm with its residual (the same per-element operations and reduction).
struct SkinnyCombineEpilogue {
  MoeCombineNormParams cn{};
  uint32_t* counter = nullptr;
};

struct SkinnyGemmParams {
  // g.offsets may be nullptr: one group of g.max_rows rows starting at row 0.
  GroupedGemmParams g;
  // Host-side upper bound on the rows of any one group (MoE: tokens, as a token picks an
  // expert at most once; dense: M). Picks 8 or 16 rows per pass; larger groups loop.
  int64_t max_group_rows = 16;
  // Host-side upper bound on non-empty groups (MoE: min(E, tokens * top_k)); 0 = num_experts.
  int64_t max_active_groups = 0;
  // Tuning variant (warps per block x 16-row tiles per warp [x min resident blocks per SM]:
  // 0 = 4x1, 1 = 8x1, 2 = 4x2, 3 = 4x2x8, 4 = 8x2x3); < 0 picks SkinnyAutoVariant. All
  // variants compute the same result.
  int variant = -1;
  // Batched form only (offsets == nullptr): per-group strides in elements of a, w and out
  // (group_stride_w < 0: N * K, the contiguous [G, N, K] layout).
  int64_t group_stride_a = 0, group_stride_w = -1, group_stride_out = 0;
  // K splits: 0 = SkinnyPlanFor's choice, 1 = no split, > 1 = that many (clamped to the chunks).
  // A split needs the workspace: splitk_ws (fp32, SkinnyPlan::ws_floats) and splitk_counters
  // (SkinnyPlan::counters, zero-initialised once); without enough of either the op runs unsplit.
  int splits = 0;
  float* splitk_ws = nullptr;
  int64_t splitk_ws_floats = 0;
  uint32_t* splitk_counters = nullptr;
  int64_t splitk_counter_count = 0;
  // The combine epilogue (above), or nullptr. Verified on the H200 and slower than the
  // separate launches (session 10); the runner keeps it off by default.
  const SkinnyCombineEpilogue* combine = nullptr;
  // gate_up with SiLU-and-mul in the epilogue (CudaRunnerOptions::fused_gate_up_silu): the
  // weights are [E, N = 2I, K] (gate rows [0, I), up rows [I, 2I)); each block takes 16 gate rows
  // and the same 16 up rows (a two-tile variant) and writes act[t, i] = silu(gate) * up as bf16
  // into g.out ([rows, I], row stride g.ldo). SiluAndMulKernel's fp32 operations on the fp32 sums
  // the plain GEMM would write: the bits of SkinnyGemm (fp32 out) then SiluAndMul (bf16 out).
  // The launch of SiLU-and-mul and the fp32 gate_up round trip are gone. Needs
  // SkinnySiluFits(*this). Verified bit-identical on the H200 (session 11 run 1); the runner's
  // default for decode passes of <= 8 tokens since session 11.
  bool silu_pair = false;
};

inline constexpr int kSkinnyVariants = 5;
// The variant used when SkinnyGemmParams::variant < 0 and K is not split (slots = grid slots
// for groups).
int SkinnyAutoVariant(bool fp8, int64_t N, int64_t K, int64_t slots, int64_t max_group_rows);

// Launch plan: variant, K splits, chunks (64 k fp8 / 32 k bf16) per split, and the split-K
// workspace it needs (0 when unsplit). Heuristic (measured on the H200, splitk_2026-11-29.md):
// FP8 dense projections whose 32-row tiles are fewer than 4 per SM and K >= 4096 split K at
// decode sizes (always at <= 8 rows; with more rows only where it measured faster: K >= 16384,
// N <= 1024, or N <= 2048 at <= 16 rows; rows enter by their power-of-2 class), on the register-capped
// 32-row variant (8 resident blocks per SM) with splits = min(16, 8 x SMs / tiles, K / one
// warp iteration): about one wave of resident blocks.
struct SkinnyPlan {
  int variant = 0, splits = 1;
  int64_t chunks_per_split = 0, ws_floats = 0, counters = 0;
};
// `sp` as SkinnyGemm would run it, ignoring whether a workspace is attached (size one with it).
// Errors: CheckError on an empty shape (N, K or groups <= 0) or max_rows < 0.
SkinnyPlan SkinnyPlanFor(const SkinnyGemmParams& sp);

// Whether SkinnyGemm runs sp with a SkinnyCombineEpilogue of rows of d elements and top_k routed
// slots a token: the plain kernel at <= 8 rows a group with bf16 out (fp32 out for the norm-only
// form, top_k 0), top_k <= 16, d <= 8 x the variant's threads, and
// norm::RmsNormThreads(d) a multiple of (at most 8 times) the variant's threads (sp.combine and
// the splits' workspace are not looked at: a split needs one).
bool SkinnyCombineFits(const SkinnyGemmParams& sp, int64_t d, int64_t top_k);

// Whether SkinnyGemm runs sp with silu_pair: the plain kernel (no K split, not the batched form)
// on a two-tile variant (SkinnyPlanFor(sp).variant 2, 3 or 4), <= 8 rows a group, N a multiple
// of 32 (I = N / 2 a multiple of 16: a 16-row tile never straddles a 128-row FP8 scale block),
// bf16 output, no combine epilogue.
bool SkinnySiluFits(const SkinnyGemmParams& sp);

// Errors: DS_CHECK on bad shapes or missing FP8 scales. Does not synchronise.
void SkinnyGemm(const SkinnyGemmParams& p);

}  // namespace ds::cuda
