// FP8 block-scaled dense GEMM on Hopper (sm_90a), our own wgmma kernels for the two DeepSeek-V3
// projections whose shapes the library kernels (cuBLASLt, our CUTLASS configurations) leave below
// 85% of the fp8 ceiling at prefill sizes (bench/results/KERNELS_RUNS.md, session 15):
// GemmFp8's contract (gemm.h), y[M, N] = x[M, K] @ w[N, K]^T with DeepSeek-V3's block scales
// (tech report section 3.3.2: 1x128 activation groups, 128x128 weight blocks, each 128-wide K
// block's wgmma sums promoted to fp32 with both scales).
//
// Forms (Fp8GemmWgmmaForm), both persistent (a CTA a SM) with warpgroup 0 as the producer (one
// thread issues the TMA loads into a ring of stages) and warpgroups 1 and 2 each owning 64 rows of
// a 128-row tile (wgmma m64nNk32 on e4m3 a K block, its sums promoted with both scales while the
// other warpgroup's wgmma runs):
//   - kPanel, for K <= 512 (kv_b_proj: K = kv_lora_rank = 512, N = heads x 256). Each 128 x 128
//     tile holds only four K blocks, and library kernels reload both operands for every tile and
//     stall on its 32 KB store. Here a CTA takes a contiguous range of tiles in row-panel-major
//     order and keeps the 128 x K activation panel (<= 64 KB) in shared memory while it sweeps
//     the panel's column tiles, so only the weight tiles stream (16 KB a K block, 8 stages). The
//     bf16 rows go through a 128-byte-swizzled staging buffer into an asynchronous TMA store,
//     so the next tile's loads and MMAs run under the store; with overlap_epilogue the staging
//     itself runs under the next tile's first K block. kRegisterA holds the panel as wgmma A
//     fragments in registers instead (64 a thread), so the tensor cores read only the weights.
//   - kTile144, for N % 144 == 0 (kv_a_proj_with_mqa: N = 576 = 4 x 144, K = 7168). 128 x 144
//     tiles, both operands streamed (34 KB a K block, 6 stages): at M = 4096 that is 32 x 4 = 128
//     tiles, one wave on 132 SMs, where 128-column tiles make 1.2 waves. A tile straddles the
//     128-column weight scale blocks; each 8-column fragment takes its own block's scale. The
//     producer bulk-copies each K block's activation scales with its tiles; the tile's weight
//     scales sit in shared memory. The bf16 output is stored from registers.
//
// Operands as GemmFp8Params: xq [Mp, K] e4m3 (ldx), x_scales group-major [K/128, Mp]
// (Mp = Fp8PaddedM(M)); wq [N, K] e4m3 (ldw); y [Mp, N] bf16 (ldy). Weight scales transposed,
// w_scales_mn [K/128, ceil(N/128)] (Fp8TransposeWeightScales, fp8_gemm_skinny_sm90.h). Rows of y
// in [M, Mp) are written like the others (from the padded activation rows), as GemmFp8 does.
// Limits (Fp8GemmWgmmaSm90Unsupported): sm_90 device, K % 128 == 0, ldx, ldw % 16 == 0, ldy % 8
// == 0, 16-byte aligned non-null pointers (the scales too), bf16 output, dimensions below 2^31;
// kPanel: K <= 512, N % 128 == 0, no multicast; kTile144: N % 144 == 0, K <= 16384, no kRegisterA,
// no overlap_epilogue. Every schedule and option gives the same bits (each output's K blocks are
// promoted in the same order; the op tests check it), and cuBLASLt's bits at kv_a / kv_b x 4096
// in every GPU run so far (relative L2 0; the op tests bound it at 1e-4).
// Errors: CheckError.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

enum class Fp8GemmWgmmaForm : int {
  kPanel = 0,    // K <= 512: the activation panel held in shared memory, 128 x 128 tiles
  kTile144 = 1,  // N % 144 == 0: 128 x 144 tiles, both operands streamed
};

// How the two consumer warpgroups keep the tensor cores busy while they promote (same results):
enum class Fp8GemmWgmmaSchedule : int {
  kWhole = 0,        // the whole tile's columns a wgmma; promotion overlaps the other warpgroup's wgmma
                     // when the two happen to be out of step
  kSplitHalves = 1,  // columns in two halves with an accumulator set each: one half promoted while the
                     // other half's wgmma runs (A read from shared memory twice)
  kPingPong = 2,     // kWhole with the warpgroups taking turns to issue (named barriers), so each
                     // promotes while the other's wgmma runs
  kDoubleAcc = 3,    // kWhole with two accumulator sets, K blocks alternating between them, so K block
                     // kb + 1's wgmma runs while kb's sums are promoted (tile-144: chunks of 8 K blocks)
  kRegisterA = 4,    // kPanel only: kWhole with the activation panel as wgmma A fragments in registers
                     // (loaded once a panel), so the tensor cores read only the weight tiles from shared memory
};

struct Fp8GemmWgmmaSm90Params {
  GemmFp8Params g;                     // xq, x_scales, wq, y, M, N, K, strides, stream (w_scales unused)
  const float* w_scales_mn = nullptr;  // [K/128, ceil(N/128)] fp32
  Fp8GemmWgmmaForm form = Fp8GemmWgmmaForm::kPanel;
  Fp8GemmWgmmaSchedule schedule = Fp8GemmWgmmaSchedule::kWhole;
  // kTile144: 0, or 2: pairs of CTAs on neighbouring column tiles of a row tile, each loading half
  // of the activation tile and multicasting it to both (A crosses L2 once a pair), where N / 144
  // and the grid are even (else no cluster). Same results either way. (Clusters of four were
  // slower: only 30 fit at once. The panel form's weight multicast to pairs was no faster.)
  int multicast = 0;
  // kPanel with kWhole, kPingPong, kDoubleAcc or kRegisterA: each tile's epilogue (bf16 staging + TMA store) runs under the
  // next tile's first K block, whose wgmma is issued just before it. Same results either way.
  bool overlap_epilogue = false;
  // kPanel with kRegisterA, where the panels sweep in step (a CTA's panel never changes): the
  // panel's 64 KB of shared memory, free once it is in registers, holds 4 more weight stages (12).
  // Elsewhere the 8-stage ring. Same results either way.
  bool deep_ring = false;
  // With deep_ring and overlap_epilogue: two bf16 staging sets a warpgroup, alternating by tile,
  // so an epilogue waits only for the store of two tiles back (the second set takes two weight
  // stages: 10 in all). Where the deep ring does not apply (panels reload), one set. Same results.
  bool double_staging = false;
};

// kTile144 with multicast 2: how many clusters of the configuration the device keeps resident at
// once (cudaOccupancyMaxActiveClusters); 0 when it would launch without clusters.
int Fp8GemmWgmmaSm90ActiveClusters(const Fp8GemmWgmmaSm90Params& p);

// True on an sm_90 device (the kernels need no library headers).
bool Fp8GemmWgmmaSm90Available();
// Empty when Fp8GemmWgmmaSm90 takes these params, else why not.
std::string Fp8GemmWgmmaSm90Unsupported(const Fp8GemmWgmmaSm90Params& p);
void Fp8GemmWgmmaSm90(const Fp8GemmWgmmaSm90Params& p);

}  // namespace ds::cuda
