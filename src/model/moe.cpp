#include "model/moe.h"

#include <algorithm>

#include "backend/cpu/ops.h"
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

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, float* out) {
  const int64_t E = cfg.n_routed_experts, H = cfg.hidden_size, K = cfg.num_experts_per_tok;
  // router_logits: [n, E] (fp32, as transformers' router)
  std::vector<float> router_logits(n * E);
  cpu::Gemm({x, H, w.gate.data(), H, router_logits.data(), E, n, E, H, false});
  // topk_ids / topk_weights: [n, K]
  std::vector<int32_t> topk_ids(n * K);
  std::vector<float> topk_weights(n * K);
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
  rp.topk_ids = topk_ids.data();
  rp.topk_weights = topk_weights.data();
  cpu::MoeRouting(rp);

  // Shared experts first (overwrite out), then each routed expert over its tokens.
  if (w.has_shared) MlpForward(w.shared, x, n, out, /*accumulate=*/false);
  else std::fill(out, out + n * H, 0.0f);
  std::vector<std::vector<int32_t>> tok(E);
  std::vector<std::vector<float>> wt(E);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k) {
      tok[topk_ids[t * K + k]].push_back(static_cast<int32_t>(t));
      wt[topk_ids[t * K + k]].push_back(topk_weights[t * K + k]);
    }
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t ne = static_cast<int64_t>(tok[e].size());
    if (ne == 0) continue;
    // xe: [ne, H] gathered tokens; ye: [ne, H] weighted expert output
    xe.resize(ne * H);
    ye.resize(ne * H);
    for (int64_t i = 0; i < ne; ++i) std::copy(x + tok[e][i] * H, x + (tok[e][i] + 1) * H, xe.begin() + i * H);
    MlpForward(w.experts[e], xe.data(), ne, ye.data(), false, wt[e].data());
    for (int64_t i = 0; i < ne; ++i) {
      float* o = out + static_cast<int64_t>(tok[e][i]) * H;
      for (int64_t j = 0; j < H; ++j) o[j] += ye[i * H + j];
    }
  }
}

}  // namespace ds
