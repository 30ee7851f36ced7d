// MoE routing, the CUDA counterpart of ds::cpu::MoeRouting (transformers DeepseekV2Moe /
// DeepseekV3TopkRouter): scores = softmax or sigmoid of the router logits; selection on
// scores + bias (bias only for selection, noaux_tc's e_score_correction_bias); greedy top-k,
// group_limited_greedy (groups ranked by their max score) or noaux_tc (groups ranked by the sum
// of their top-2 biased scores), keeping topk_group groups; the weights are the unbiased
// scores of the chosen experts, divided by (their sum + 1e-20) when norm_topk_prob, times
// routed_scaling_factor. Experts come out in descending selection score (ties: lower index).
// num_experts <= 1024, top_k <= 32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct MoeRoutingParams {
  const float* logits;  // [n, E]
  const float* bias;    // [E] or nullptr
  int64_t n, num_experts;
  int top_k, n_group, topk_group;
  int scoring;       // 0 softmax, 1 sigmoid
  int topk_method;   // 0 greedy, 1 group_limited_greedy, 2 noaux_tc
  bool norm_topk_prob;
  float routed_scaling_factor;
  int32_t* topk_ids;    // [n, top_k]
  float* topk_weights;  // [n, top_k]
  cudaStream_t stream = nullptr;
  // CudaRunnerOptions::moe_route_warp (on by default since session 9, run 1): with num_experts
  // <= 256 one warp routes the token (up to 8 experts a lane: warp reductions and shuffles
  // instead of the block's barriers per top-k round; moe_routing.cuh, RouteTokenInWarp). The same
  // ids and weights as the block form for sigmoid scoring (V3) and non-NaN logits; with softmax
  // scoring the sum of the exponentials runs in another fp32 order (per lane, then a butterfly),
  // so the weights can move by fp32 rounding (and ids only where two scores are that close). A
  // NaN score ranks highest in the warp form; the block form never picks one over a number.
  bool warp_route = false;
};
void MoeRouting(const MoeRoutingParams& p);

}  // namespace ds::cuda
