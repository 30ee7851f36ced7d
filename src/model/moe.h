// DeepSeekMoE layer: router (softmax | sigmoid scoring; greedy | group_limited_greedy |
// noaux_tc selection with e_score_correction_bias for selection only), routed experts weighted
// by the router, plus the shared experts. Source: transformers DeepseekV2Moe / DeepseekV3MoE,
// DeepSeek-V3 technical report section 2.1.2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/mlp.h"
#include "model/safetensors.h"

namespace ds {

struct MoeWeights {
  std::vector<float> gate;     // [n_routed_experts, hidden] router weight
  std::vector<float> bias;     // [n_routed_experts] e_score_correction_bias, empty if absent
  std::vector<MlpWeights> experts;  // [n_routed_experts], inter = moe_intermediate_size
  bool has_shared = false;
  MlpWeights shared;           // inter = moe_intermediate_size * n_shared_experts
};

// Loads <prefix>.gate.weight, <prefix>.gate.e_score_correction_bias (required for noaux_tc),
// <prefix>.experts.<e>.*, <prefix>.shared_experts.*.
Status LoadMoe(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               MoeWeights* w);

// out[n, hidden] = MoE(x[n, hidden]) (overwrites out).
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, float* out);

}  // namespace ds
