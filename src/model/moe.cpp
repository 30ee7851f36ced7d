#include "model/moe.h"

#include <algorithm>

#include "backend/cpu/ops.h"
#include "common/check.h"
#include "model/weights.h"

namespace ds {

Status LoadMoe(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               MoeWeights* w) {
  const int64_t E = cfg.n_routed_experts, H = cfg.hidden_size;
  const auto block = cfg.quant.weight_block_size;
  DS_ASSIGN_OR_RETURN(w->gate, LoadTensorF32(ckpt, prefix + ".gate.weight", {E, H}, block));
  const std::string bias_name = prefix + ".gate.e_score_correction_bias";
  if (ckpt.Find(bias_name) != nullptr) {
    DS_ASSIGN_OR_RETURN(w->bias, LoadTensorF32(ckpt, bias_name, {E}, block));
  } else if (cfg.topk_method == TopkMethod::kNoauxTc) {
    return NotFound("tensor '" + bias_name + "' is required by topk_method noaux_tc");
  }
  w->experts.resize(E);
  for (int64_t e = 0; e < E; ++e)
    DS_RETURN_IF_ERROR(LoadMlp(ckpt, cfg, prefix + ".experts." + std::to_string(e), cfg.moe_intermediate_size,
                               &w->experts[e]));
  w->has_shared = cfg.n_shared_experts > 0;
  if (w->has_shared)
    DS_RETURN_IF_ERROR(LoadMlp(ckpt, cfg, prefix + ".shared_experts",
                               static_cast<int64_t>(cfg.moe_intermediate_size) * cfg.n_shared_experts,
                               &w->shared));
  return Status::Ok();
}

void MoeRoute(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, int32_t* topk_ids,
              float* topk_weights) {
  const int64_t E = cfg.n_routed_experts, H = cfg.hidden_size, K = cfg.num_experts_per_tok;
  // router_logits: [n, E] (fp32, as transformers' router)
  std::vector<float> router_logits(n * E);
  cpu::Gemm({x, H, w.gate.data(), H, router_logits.data(), E, n, E, H, false});
  cpu::MoeRoutingParams rp{};
  rp.logits = router_logits.data();
  rp.bias = w.bias.empty() ? nullptr : w.bias.data();
  rp.n = n;
  rp.num_experts = E;
  rp.top_k = static_cast<int>(K);
  rp.n_group = cfg.n_group;
  rp.topk_group = cfg.topk_group;
  rp.scoring = cfg.scoring_func == ScoringFunc::kSoftmax ? 0 : 1;
  rp.topk_method = cfg.topk_method == TopkMethod::kGreedy ? 0
                   : cfg.topk_method == TopkMethod::kGroupLimitedGreedy ? 1 : 2;
  rp.norm_topk_prob = cfg.norm_topk_prob;
  rp.routed_scaling_factor = static_cast<float>(cfg.routed_scaling_factor);
  rp.topk_ids = topk_ids;
  rp.topk_weights = topk_weights;
  cpu::MoeRouting(rp);
}

void MapToPhysical(const ExpertMap* map, int layer, const int32_t* topk_ids, int64_t n, int64_t k,
                   int32_t* physical_ids) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j)
      physical_ids[t * k + j] = map == nullptr ? topk_ids[t * k + j] : map->ChooseReplica(layer, topk_ids[t * k + j], t);
}

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, float* out,
                const MoePlacement& placement) {
  const int64_t E = cfg.n_routed_experts, H = cfg.hidden_size, K = cfg.num_experts_per_tok;
  const ExpertMap* map = placement.map;
  if (map != nullptr) {
    DS_CHECK(map->num_logical() == E && placement.layer >= 0 && placement.layer < map->num_layers())
        << "MoeForward: expert map (" << map->num_layers() << " layers, " << map->num_logical()
        << " logical experts) does not fit layer " << placement.layer << " with " << E << " routed experts";
  }
  // topk_ids / topk_weights: [n, K] logical expert ids and router weights
  std::vector<int32_t> topk_ids(n * K);
  std::vector<float> topk_weights(n * K);
  MoeRoute(cfg, w, x, n, topk_ids.data(), topk_weights.data());
  // physical_ids: [n, K] the slot serving each (token, k)
  std::vector<int32_t> physical_ids(n * K);
  MapToPhysical(map, placement.layer, topk_ids.data(), n, K, physical_ids.data());
  if (placement.recorder != nullptr)
    placement.recorder->Record(placement.layer, topk_ids.data(), physical_ids.data(), n * K);

  // Dispatch: slot_rows[s] = the (token, k) pairs (as t * K + k) served by slot s, token order.
  const int64_t P = map == nullptr ? E : map->num_physical();
  std::vector<std::vector<int32_t>> slot_rows(P);
  for (int64_t i = 0; i < n * K; ++i) slot_rows[physical_ids[i]].push_back(static_cast<int32_t>(i));

  // Shared experts first (overwrite out), then each logical expert over the rows of its slots.
  if (w.has_shared) MlpForward(w.shared, x, n, out, /*accumulate=*/false);
  else std::fill(out, out + n * H, 0.0f);
  std::vector<int32_t> rows;  // (t * K + k) pairs of logical expert e, ascending (= token order)
  std::vector<float> xe, ye, we;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    if (map == nullptr) {
      rows = slot_rows[e];
    } else {
      for (int32_t s : map->replicas(placement.layer, static_cast<int>(e)))
        rows.insert(rows.end(), slot_rows[s].begin(), slot_rows[s].end());
      std::sort(rows.begin(), rows.end());
    }
    const int64_t ne = static_cast<int64_t>(rows.size());
    if (ne == 0) continue;
    // xe: [ne, H] gathered tokens; we: [ne] router weights; ye: [ne, H] weighted expert output
    xe.resize(ne * H);
    ye.resize(ne * H);
    we.resize(ne);
    for (int64_t i = 0; i < ne; ++i) {
      const int64_t t = rows[i] / K;
      std::copy(x + t * H, x + (t + 1) * H, xe.begin() + i * H);
      we[i] = topk_weights[rows[i]];
    }
    MlpForward(w.experts[e], xe.data(), ne, ye.data(), false, we.data());
    for (int64_t i = 0; i < ne; ++i) {
      float* o = out + (rows[i] / K) * H;
      for (int64_t j = 0; j < H; ++j) o[j] += ye[i * H + j];
    }
  }
}

}  // namespace ds
