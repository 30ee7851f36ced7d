// MoE router logits for decode-size batches: y[m, n] = sum_k x[m, k] * w[n, k] in fp32 (no TF32),
// the CUDA counterpart of ds::cpu::Gemm on the router (src/model/moe.cpp: router_logits =
// x @ gate^T, fp32 as transformers' DeepseekV3TopkRouter / MoEGate computes them). For M <=
// kRouterGemvMaxRows rows in one launch (GemmF32 on cuBLASLt takes 2 launches at M = 1, a dot
// kernel and a reduction: 6.3 us on V2-Lite's 64 x 2048 router under ncu, session 7 run 3).
//
// Layout: x [M, K] fp32 (row stride ldx), w [N, K] fp32 (row stride ldw), y [M, N] fp32 (row
// stride ldy). One 256-thread block per output column n: its 8 warps stride over K in float4
// steps (w loaded once, reused for every row), each thread sums its products in k order, then a
// butterfly shuffle per warp and the 8 warps' partials added in warp order. Deterministic (the
// same order every launch, independent of M), but not cuBLAS's order: the logits differ from
// GemmF32's by fp32 rounding (~1e-7 relative).
//
// Requirements: 1 <= M <= kRouterGemvMaxRows, K % 4 == 0, ldx % 4 == 0, ldw % 4 == 0, x and w
// 16-byte aligned. Errors: CheckError on a violation or a CUDA launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

inline constexpr int64_t kRouterGemvMaxRows = 16;

struct RouterGemvParams {
  const float* x = nullptr; int64_t ldx = 0;  // [M, K]
  const float* w = nullptr; int64_t ldw = 0;  // [N, K]
  float* y = nullptr; int64_t ldy = 0;        // [M, N]
  int64_t M = 0, N = 0, K = 0;
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (launch.cuh); same results either way
};
void RouterGemv(const RouterGemvParams& p);

}  // namespace ds::cuda
