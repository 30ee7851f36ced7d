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
#include "parallel/expert_load.h"
#include "parallel/expert_map.h"

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

// Where this layer's routed experts run (parallel/expert_map.h) and where its load is counted.
struct MoePlacement {
  const ExpertMap* map = nullptr;          // nullptr: identity (slot e holds logical expert e)
  int layer = 0;                           // the model layer id: row of `map` and `recorder`
  ExpertLoadRecorder* recorder = nullptr;  // nullptr: not recorded
};

// Router only: topk_ids [n, K] logical expert ids and topk_weights [n, K] (fp32) of x [n, hidden].
void MoeRoute(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, int32_t* topk_ids,
              float* topk_weights);

// physical_ids [n, K]: the slot serving each (token t, k) pair, map->ChooseReplica(layer,
// topk_ids[t, k], t); the logical id itself when map is null.
void MapToPhysical(const ExpertMap* map, int layer, const int32_t* topk_ids, int64_t n, int64_t k,
                   int32_t* physical_ids);

// out[n, hidden] = MoE(x[n, hidden]) (overwrites out). Routing picks logical experts (math
// unchanged); each (token, k) pair is then dispatched to a physical slot of `placement.map` and
// counted in `placement.recorder`. Every slot runs its logical expert's weights; on this one
// rank the replicas of an expert share one weight copy, so the rows of all its slots run as one
// GEMM in ascending token order and results are combined per token in ascending logical order:
// the output is bit-identical for every valid map. The map must fit cfg (DS_CHECK).
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, float* out,
                const MoePlacement& placement = {});

}  // namespace ds
