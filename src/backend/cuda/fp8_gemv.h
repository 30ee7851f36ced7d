// FP8 GEMV for decode (CudaRunnerOptions::fp8_gemv, on by default since session 7: the whole
// suite passes with it on; V3 dense gate_up 3.6 TB/s (0.92 of copy), o_proj and dense down 0.81
// with one CTA per SM): the dense FP8 projections of a decode step at M <= 8 rows, as pure
// weight streaming.
//
//   out[r, n] = sum_k a[r, k] * w[n, k] * s[n / 128, k / 128]      r < M <= 8, n < N, k < K
//
// a: bf16 [M, K], row stride lda (elements); w: e4m3 (OCP e4m3fn) [N, K] row-major; s: fp32
// [ceil(N/128), ceil(K/128)] 128x128 block scales (DeepSeek-V3's checkpoint layout,
// weight_scale_inv); out: fp32 (or bf16 with out_bf16) [M, N], row stride ldo (elements). The
// same math as SkinnyGemm's dense FP8 path (skinny_gemm.h) and the CPU reference: e4m3 weights
// widened to bf16 exactly, activations kept bf16 (no activation quantisation), products exact
// in fp32 (bf16 x bf16 tensor-core MMA), fp32 sums; the block scale multiplies each 128-k
// block's partial dot product in fp32. Only the summation order differs from SkinnyGemm
// (128-k blocks instead of 64-k chunks; split-K partials summed in k order).
//
// Kernel (fp8_gemv.cu), the TMA path: the weights are cut into units of 128 rows x 128 k (one
// scale block, 16 KB); units are ordered tile-major (all k of rows 0..127, then rows 128..255,
// ...) and a persistent grid of C CTAs (auto: SMs x resident CTAs per SM, 2 on the H200) takes
// balanced contiguous ranges, CTA c the units [c U / C, (c + 1) U / C): no wave-quantisation
// tail (the current kernel's 1152 blocks over 1056 slots ran a partial second wave). Per CTA a
// producer warp streams its units through a 6-stage shared-memory ring with TMA (one 2-D box of
// 128 rows x 128 bytes of weights, 128-byte swizzle, L2 evict-first; two boxes of 8 rows x 64
// k of activations, rows >= M and k >= K zero-filled by the TMA unit; the block scale by a
// 4-byte cp.async), each stage an mbarrier ("full": bytes + the scale's arrival; "empty": one
// arrival per consumer warp). 2 CTAs x 6 stages x 16 KB = up to 192 KB of weights in flight
// per SM (Little's law at ~4 TB/s and ~1 us loaded latency asks for >= ~32 KB per SM; the
// current kernel keeps ~4 KB per warp). 8 consumer warps own 16 weight rows each: per stage a
// lane reads its 2 x 32 weight bytes and 64 activation bytes (conflict-free for the weights),
// releases the stage, widens e4m3 -> bf16 with 9 integer/bf16 ops per 4 weights (SkinnyGemm:
// a byte permute + shifts + masks + a multiply per pair) and runs 8 mma.sync m16n8k16 (weights
// = the 16-row operand, the up to 8 activation rows = the 8 columns). Issue budget (SASS of the
// loop): ~225 instructions per 2 KB per warp, ~1.5 per clock per SM at 3.5 TB/s (~37% of
// issue; the current kernel spends ~60% at 2.8 TB/s). ptxas: 64 registers, no spills;
// 111.7 KB of dynamic shared memory per CTA.
// Edges: rows >= N and k >= K come from the TMA unit's zero fill (the last unit of a K % 128 in
// (0, 64] shape has a wholly out-of-bounds activation box, also zero-filled). The e4m3 NaN codes
// (0x7F, 0xFF; absent from checkpoints) read as +-480 on this path, as in SkinnyGemm, and as NaN
// on the generic one.
// Split tiles (a tile whose units span several CTAs): each CTA's consumer warp writes its 16 x 8
// fp32 partial to the workspace and bumps a per-(tile, warp) counter; the last arriver sums the
// partials in CTA order (= k order, independent of scheduling), writes the output and resets
// the counter to zero. Deterministic; no host synchronisation, no allocation: safe inside CUDA
// graph capture. The plan depends on N, K and the device only, never on M, and every output row
// is computed from its own activation row only (MMA columns are independent), so a row's bits
// do not depend on M: a decode batch of 3 and its graph bucket of 4 give identical rows.
//
// The generic path (any shape the TMA path cannot take: K % 16 != 0, lda % 8 != 0, a or w not
// 16-byte aligned, or a device other than compute capability 9.0): a simple warp-per-row
// kernel, same math (per-128-k partials times the scale), fp32 CUDA-core FMAs; correct but slow,
// meant for odd shapes only (every DeepSeek-V3 projection takes the TMA path).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// Rows (M) one launch serves.
inline constexpr int64_t kFp8GemvMaxRows = 8;
// The runner's dispatch (CudaRunnerOptions::fp8_gemv) takes only weights of at least this many
// elements, with Fp8GemvRunnerCtas CTAs. H200 runs, M = 1, against SkinnyGemm as planned:
// session 6 run 10 (auto CTAs): V3 dense gate_up (36864 x 7168) 75.7 vs 92.5 us (3.49 TB/s,
// 1.22x); q_b 0.74x; q_a, kv_a, shared expert 0.65-0.87x (too few units per CTA to fill the
// pipeline). Session 7 run 1 (CTA sweep): o_proj (7168 x 16384) 37.1 us with one CTA per SM vs
// 40.8 (auto, two per SM: 43.6); dense down (7168 x 18432) 42.0 vs 45.3 (auto 46.8); gate_up
// auto 74.3 vs 91.7. So: o_proj (117M), dense down (132M) and dense gate_up (264M).
inline constexpr int64_t kFp8GemvMinWeights = int64_t{96} << 20;
// The runner's CTA count for a weight with K columns on a device of `sms` SMs
// (Fp8GemvParams::ctas; 0 = auto): one per SM for K >= 16384 (o_proj, dense down: faster than
// auto's two per SM, session 7 run 1), auto otherwise. Independent of M, so a padded graph step
// and its eager pass run the same plan.
inline int Fp8GemvRunnerCtas(int64_t K, int sms) { return K >= 16384 ? sms : 0; }

struct Fp8GemvParams {
  const __nv_bfloat16* a = nullptr;  // [M, K] bf16, row stride lda (elements, >= K)
  int64_t lda = 0;
  const uint8_t* w = nullptr;        // [N, K] e4m3, row-major (row stride K bytes)
  const float* w_scales = nullptr;   // [ceil(N/128), ceil(K/128)] fp32
  void* out = nullptr;               // [M, N] fp32 (bf16 with out_bf16), row stride ldo (elements, >= N)
  bool out_bf16 = false;
  int64_t ldo = 0;
  int64_t M = 0, N = 0, K = 0;       // 0 <= M <= kFp8GemvMaxRows; N, K >= 1
  // TMA path: Fp8GemvWorkspaceBytes(N, K, ctas) bytes of device memory, 16-byte aligned, zeroed
  // once before the first use (the kernel leaves its counters zero again). One workspace serves
  // any sequence of launches on one stream; concurrent launches need their own.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh)
  // TMA path (session 36): the producer requests the weights and scales of its CTA's first ring
  // stages (up to 6 x 16 KB) BEFORE the grid-dependency wait, the activations and every other
  // global access after it. With pdl, the weight stream then starts while the previous kernel in
  // the stream still runs (its tail and this launch's latency overlap the first loads). Only
  // for weights no kernel that may still run writes (a decode step's: written once at load).
  // The same bits (only the order of independent loads changes); without pdl it changes nothing.
  bool prefetch_weights = false;
  // CTAs of the TMA path: 0 = SMs x resident CTAs per SM (capped at units / 2, >= 1); > 0 = that
  // many (capped at the units; tests and bench sweeps). Changes the split-K sum order only.
  int ctas = 0;
};

// How Fp8Gemv runs these params: the TMA path or the generic one, the 128 x 128 units and the
// CTAs that share them, the workspace the TMA path needs (0 for the generic path).
struct Fp8GemvPlan {
  bool tma = false;
  int64_t tiles = 0, units = 0, ctas = 0;
  size_t workspace_bytes = 0;
};
// Errors: CheckError on a bad shape (M outside 0..8, N or K < 1, lda < K, ldo < N).
Fp8GemvPlan Fp8GemvPlanFor(const Fp8GemvParams& p);

// Workspace bytes of the TMA path for an N x K weight on the current device (independent of M
// and of the pointers, so a caller can size it before a graph capture): per-(tile, warp)
// counters plus 8 KB of partials per CTA (~2.1 MB on the H200). Errors: CheckError if N, K < 1.
size_t Fp8GemvWorkspaceBytes(int64_t N, int64_t K, int ctas = 0);

// Launches the GEMV on p.stream (nothing for M = 0). Does not synchronise.
// Errors: CheckError on a bad shape or null pointers, on a TMA-path launch without enough
// workspace (or a workspace not 16-byte aligned), and on CUDA errors (launch configuration).
void Fp8Gemv(const Fp8GemvParams& p);

}  // namespace ds::cuda
