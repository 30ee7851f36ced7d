#include "planner/model_size.h"

namespace ds::planner {

const char* WTypeName(WType t) {
  switch (t) {
    case WType::kBF16: return "bf16";
    case WType::kFP8: return "fp8";
    case WType::kINT8: return "int8";
  }
  return "?";
}

StatusOr<WType> ParseWType(const std::string& s) {
  if (s == "bf16") return WType::kBF16;
  if (s == "fp8") return WType::kFP8;
  if (s == "int8") return WType::kINT8;
  return InvalidArgument("unknown dtype '" + s + "' (bf16, fp8, int8)");
}

double WTypeBytes(WType t) { return t == WType::kBF16 ? 2.0 : 1.0; }

namespace {
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t Linear::bytes(WType t) const {
  int64_t per = 0;
  switch (t) {
    case WType::kBF16: per = in * out * 2; break;
    case WType::kFP8: per = in * out + CeilDiv(in, 128) * CeilDiv(out, 128) * 4; break;
    case WType::kINT8: per = in * out + out * 4; break;
  }
  return per * count;
}

int64_t Module::linear_params() const {
  int64_t p = 0;
  for (const auto& l : linears) p += l.params();
  return p;
}
int64_t Module::params() const { return linear_params() + vector_params; }
int64_t Module::bytes(WType t) const {
  int64_t b = vector_params * 2;
  for (const auto& l : linears) b += l.bytes(t);
  return b;
}

ModuleShapes CountModuleShapes(const ModelConfig& c) {
  ModuleShapes m;
  const int64_t h = c.hidden_size, H = c.num_attention_heads;
  m.n_layers = c.num_hidden_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l) (c.is_moe_layer(l) ? m.n_moe_layers : m.n_dense_layers)++;
  m.n_mtp_layers = c.num_nextn_predict_layers;
  m.n_routed = c.n_routed_experts;
  m.n_shared = c.n_shared_experts;
  m.topk = c.num_experts_per_tok;

  // MLA.
  auto& a = m.attention;
  if (c.q_lora_rank > 0) {
    a.linears.push_back({"q_a_proj", h, c.q_lora_rank});
    a.linears.push_back({"q_b_proj", c.q_lora_rank, H * c.qk_head_dim()});
    a.vector_params += c.q_lora_rank;  // q_a_layernorm
  } else {
    a.linears.push_back({"q_proj", h, H * c.qk_head_dim()});
  }
  a.linears.push_back({"kv_a_proj_with_mqa", h, c.kv_lora_rank + c.qk_rope_head_dim});
  a.vector_params += c.kv_lora_rank;  // kv_a_layernorm
  a.linears.push_back({"kv_b_proj", c.kv_lora_rank, H * (c.qk_nope_head_dim + c.v_head_dim)});
  a.linears.push_back({"o_proj", H * c.v_head_dim, h});
  a.vector_params += 2 * h;  // input_layernorm + post_attention_layernorm

  m.dense_ffn.linears = {{"gate_proj", h, c.intermediate_size},
                         {"up_proj", h, c.intermediate_size},
                         {"down_proj", c.intermediate_size, h}};
  const int64_t mi = c.moe_intermediate_size;
  m.routed_expert.linears = {{"gate_proj", h, mi}, {"up_proj", h, mi}, {"down_proj", mi, h}};
  m.shared_experts.linears = {{"gate_proj", h, mi * c.n_shared_experts},
                              {"up_proj", h, mi * c.n_shared_experts},
                              {"down_proj", mi * c.n_shared_experts, h}};
  // Router: weight [n_routed, hidden] kept in bf16 (vector-like, never quantised) + the
  // noaux_tc correction bias.
  m.router.vector_params = static_cast<int64_t>(c.n_routed_experts) * h +
                           (c.topk_method == TopkMethod::kNoauxTc ? c.n_routed_experts : 0);
  m.embedding.vector_params = static_cast<int64_t>(c.vocab_size) * h;
  m.lm_head.vector_params = c.tie_word_embeddings ? 0 : static_cast<int64_t>(c.vocab_size) * h;
  m.final_norm.vector_params = h;
  // MTP (DeepSeek-V3 sec. 2.2): eh_proj [h, 2h], enorm, hnorm, shared_head.norm; its
  // transformer block is counted as a MoE layer; embedding and head are shared.
  m.mtp_extra.linears = {{"eh_proj", 2 * h, h}};
  m.mtp_extra.vector_params = 3 * h;
  return m;
}

int64_t TotalParams(const ModuleShapes& m) {
  return m.n_layers * m.attention.params() + m.n_dense_layers * m.dense_ffn.params() +
         m.n_moe_layers * (m.n_routed * m.routed_expert.params() + m.shared_experts.params() +
                           m.router.params()) +
         m.embedding.params() + m.lm_head.params() + m.final_norm.params();
}

int64_t ActivatedParams(const ModuleShapes& m) {
  return m.n_layers * m.attention.params() + m.n_dense_layers * m.dense_ffn.params() +
         m.n_moe_layers * (m.topk * m.routed_expert.params() + m.shared_experts.params() +
                           m.router.params()) +
         m.embedding.params() + m.lm_head.params() + m.final_norm.params();
}

int64_t MtpParams(const ModuleShapes& m) {
  return m.n_mtp_layers * (m.mtp_extra.params() + m.attention.params() +
                           m.n_routed * m.routed_expert.params() + m.shared_experts.params() +
                           m.router.params());
}

int64_t LatentCacheBytesPerToken(const ModelConfig& c, WType kv, int layers) {
  const int64_t per_layer = static_cast<int64_t>(c.latent_dim()) * (kv == WType::kBF16 ? 2 : 1) +
                            (kv == WType::kBF16 ? 0 : 4);
  return per_layer * layers;
}

}  // namespace ds::planner
