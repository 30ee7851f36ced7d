#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds {
namespace {

using json = nlohmann::json;

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgument("config.json: field '" + field + "' " + what);
}

// Reads an integer field. Absent or null -> keep `*out` (the default) unless `required`.
Status GetInt(const json& j, const char* key, int* out, bool required = false, int min_value = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return FieldError(key, "is required");
    return Status::Ok();
  }
  if (!it->is_number_integer()) {
    // Accept integral floats such as 4096.0.
    if (it->is_number_float()) {
      double d = it->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 2e9) {
        *out = static_cast<int>(d);
      } else {
        return FieldError(key, "must be an integer, got " + it->dump());
      }
    } else {
      return FieldError(key, "must be an integer, got " + it->dump());
    }
  } else {
    int64_t v = it->get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) return FieldError(key, "is out of range: " + it->dump());
    *out = static_cast<int>(v);
  }
  if (*out < min_value)
    return FieldError(key, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(*out));
  return Status::Ok();
}

Status GetDouble(const json& j, const char* key, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return FieldError(key, "must be a number, got " + it->dump());
  *out = it->get<double>();
  if (!std::isfinite(*out)) return FieldError(key, "must be finite");
  return Status::Ok();
}

Status GetBool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return FieldError(key, "must be true or false, got " + it->dump());
  *out = it->get<bool>();
  return Status::Ok();
}

Status GetString(const json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return FieldError(key, "must be a string, got " + it->dump());
  *out = it->get<std::string>();
  return Status::Ok();
}

// Rope parameters from either {"rope_type"|"type", "rope_theta", "factor", ...} (transformers 5
// rope_parameters) or the official rope_scaling dict. `prefix` names the field in errors.
Status ParseRopeDict(const json& r, const std::string& prefix, RopeConfig* rope) {
  if (!r.is_object()) return FieldError(prefix, "must be an object or null");
  std::string type;
  if (r.contains("rope_type") && !r["rope_type"].is_null()) {
    if (!r["rope_type"].is_string()) return FieldError(prefix + ".rope_type", "must be a string");
    type = r["rope_type"].get<std::string>();
  } else if (r.contains("type") && !r["type"].is_null()) {
    if (!r["type"].is_string()) return FieldError(prefix + ".type", "must be a string");
    type = r["type"].get<std::string>();
  }
  if (!type.empty()) rope->type = type;
  if (rope->type != "default" && rope->type != "yarn")
    return FieldError(prefix + ".rope_type", "'" + rope->type + "' is not supported (default, yarn)");
  auto num = [&](const char* k, double* out) -> Status {
    auto it = r.find(k);
    if (it == r.end() || it->is_null()) return Status::Ok();
    if (!it->is_number()) return FieldError(prefix + "." + k, "must be a number, got " + it->dump());
    *out = it->get<double>();
    if (!std::isfinite(*out)) return FieldError(prefix + "." + k, "must be finite");
    return Status::Ok();
  };
  DS_RETURN_IF_ERROR(num("rope_theta", &rope->theta));
  DS_RETURN_IF_ERROR(num("factor", &rope->factor));
  DS_RETURN_IF_ERROR(num("beta_fast", &rope->beta_fast));
  DS_RETURN_IF_ERROR(num("beta_slow", &rope->beta_slow));
  DS_RETURN_IF_ERROR(num("mscale", &rope->mscale));
  DS_RETURN_IF_ERROR(num("mscale_all_dim", &rope->mscale_all_dim));
  double ompe = 0;
  DS_RETURN_IF_ERROR(num("original_max_position_embeddings", &ompe));
  if (ompe != 0) rope->original_max_position_embeddings = static_cast<int>(ompe);
  if (r.contains("truncate") && r["truncate"].is_boolean()) rope->truncate = r["truncate"].get<bool>();
  return Status::Ok();
}

}  // namespace

const char* ScoringFuncName(ScoringFunc s) {
  return s == ScoringFunc::kSigmoid ? "sigmoid" : "softmax";
}
const char* TopkMethodName(TopkMethod m) {
  switch (m) {
    case TopkMethod::kGreedy: return "greedy";
    case TopkMethod::kGroupLimitedGreedy: return "group_limited_greedy";
    case TopkMethod::kNoauxTc: return "noaux_tc";
  }
  return "?";
}

double ModelConfig::yarn_mscale_all_dim() const {
  if (rope.type != "yarn" || rope.mscale_all_dim == 0.0 || rope.factor <= 1.0) return 1.0;
  return 0.1 * rope.mscale_all_dim * std::log(rope.factor) + 1.0;
}

double ModelConfig::softmax_scale() const {
  double m = yarn_mscale_all_dim();
  return std::pow(static_cast<double>(qk_head_dim()), -0.5) * m * m;
}

StatusOr<ModelConfig> ParseModelConfig(const json& j) {
  if (!j.is_object()) return InvalidArgument("config.json: top level must be a JSON object");
  ModelConfig c;
  DS_RETURN_IF_ERROR(GetString(j, "model_type", &c.model_type));
  if (c.model_type.empty()) return FieldError("model_type", "is required");
  const bool v3 = c.model_type == "deepseek_v3" || c.model_type == "kimi_k2";
  const bool v2 = c.model_type == "deepseek_v2";
  if (!v2 && !v3)
    return FieldError("model_type", "'" + c.model_type +
                                        "' is not supported (deepseek_v2, deepseek_v3, kimi_k2)");

  // Defaults as transformers 5's DeepseekV3Config / DeepseekV2Config.
  if (v3) {
    c.vocab_size = 129280; c.hidden_size = 7168; c.intermediate_size = 18432;
    c.moe_intermediate_size = 2048; c.num_hidden_layers = 61; c.num_attention_heads = 128;
    c.n_shared_experts = 1; c.n_routed_experts = 256; c.routed_scaling_factor = 2.5;
    c.kv_lora_rank = 512; c.q_lora_rank = 1536; c.qk_rope_head_dim = 64; c.v_head_dim = 128;
    c.qk_nope_head_dim = 128; c.n_group = 8; c.topk_group = 4; c.num_experts_per_tok = 8;
    c.first_k_dense_replace = 3; c.norm_topk_prob = true; c.max_position_embeddings = 4096;
    c.num_nextn_predict_layers = 1; c.bos_token_id = 0; c.eos_token_ids = {1};
    c.scoring_func = ScoringFunc::kSigmoid; c.topk_method = TopkMethod::kNoauxTc;
  } else {
    c.vocab_size = 102400; c.hidden_size = 4096; c.intermediate_size = 11008;
    c.moe_intermediate_size = 1407; c.num_hidden_layers = 32; c.num_attention_heads = 32;
    c.n_shared_experts = 2; c.n_routed_experts = 64; c.routed_scaling_factor = 1.0;
    c.kv_lora_rank = 512; c.q_lora_rank = 1536; c.qk_rope_head_dim = 64; c.v_head_dim = 128;
    c.qk_nope_head_dim = 128; c.n_group = 1; c.topk_group = 1; c.num_experts_per_tok = 0;
    c.first_k_dense_replace = 0; c.norm_topk_prob = false; c.max_position_embeddings = 2048;
    c.num_nextn_predict_layers = 0; c.bos_token_id = 1; c.eos_token_ids = {2};
    c.scoring_func = ScoringFunc::kSoftmax; c.topk_method = TopkMethod::kGreedy;
  }

  DS_RETURN_IF_ERROR(GetInt(j, "vocab_size", &c.vocab_size, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "hidden_size", &c.hidden_size, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "intermediate_size", &c.intermediate_size, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "moe_intermediate_size", &c.moe_intermediate_size, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", &c.num_hidden_layers, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", &c.num_attention_heads, false, 1));
  c.num_key_value_heads = c.num_attention_heads;
  DS_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", &c.num_key_value_heads, false, 1));
  // q_lora_rank: null means "no q compression" (V2-Lite).
  if (j.contains("q_lora_rank") && j["q_lora_rank"].is_null()) c.q_lora_rank = 0;
  else DS_RETURN_IF_ERROR(GetInt(j, "q_lora_rank", &c.q_lora_rank, false, 0));
  DS_RETURN_IF_ERROR(GetInt(j, "kv_lora_rank", &c.kv_lora_rank, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "qk_nope_head_dim", &c.qk_nope_head_dim, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "qk_rope_head_dim", &c.qk_rope_head_dim, false, 2));
  DS_RETURN_IF_ERROR(GetInt(j, "v_head_dim", &c.v_head_dim, false, 1));
  DS_RETURN_IF_ERROR(GetBool(j, "rope_interleave", &c.rope_interleave));
  DS_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", &c.max_position_embeddings, false, 1));

  if (j.contains("n_routed_experts") && j["n_routed_experts"].is_null()) c.n_routed_experts = 0;
  else DS_RETURN_IF_ERROR(GetInt(j, "n_routed_experts", &c.n_routed_experts, false, 0));
  if (j.contains("n_shared_experts") && j["n_shared_experts"].is_null()) c.n_shared_experts = 0;
  else DS_RETURN_IF_ERROR(GetInt(j, "n_shared_experts", &c.n_shared_experts, false, 0));
  DS_RETURN_IF_ERROR(GetInt(j, "num_experts_per_tok", &c.num_experts_per_tok, false, 0));
  DS_RETURN_IF_ERROR(GetInt(j, "n_group", &c.n_group, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "topk_group", &c.topk_group, false, 1));
  DS_RETURN_IF_ERROR(GetBool(j, "norm_topk_prob", &c.norm_topk_prob));
  DS_RETURN_IF_ERROR(GetDouble(j, "routed_scaling_factor", &c.routed_scaling_factor));
  DS_RETURN_IF_ERROR(GetInt(j, "first_k_dense_replace", &c.first_k_dense_replace, false, 0));
  DS_RETURN_IF_ERROR(GetInt(j, "moe_layer_freq", &c.moe_layer_freq, false, 1));
  DS_RETURN_IF_ERROR(GetInt(j, "num_nextn_predict_layers", &c.num_nextn_predict_layers, false, 0));
  DS_RETURN_IF_ERROR(GetDouble(j, "rms_norm_eps", &c.rms_norm_eps));
  DS_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", &c.tie_word_embeddings));
  DS_RETURN_IF_ERROR(GetBool(j, "attention_bias", &c.attention_bias));
  DS_RETURN_IF_ERROR(GetString(j, "hidden_act", &c.hidden_act));
  DS_RETURN_IF_ERROR(GetString(j, "torch_dtype", &c.torch_dtype));
  if (j.contains("dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"].get<std::string>();
  DS_RETURN_IF_ERROR(GetInt(j, "bos_token_id", &c.bos_token_id, false, 0));
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    c.eos_token_ids.clear();
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int>());
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_number_integer()) return FieldError("eos_token_id", "must hold integers");
        c.eos_token_ids.push_back(e.get<int>());
      }
    } else {
      return FieldError("eos_token_id", "must be an integer or a list of integers");
    }
  }

  // scoring_func / topk_method.
  std::string scoring, topk;
  DS_RETURN_IF_ERROR(GetString(j, "scoring_func", &scoring));
  if (!scoring.empty()) {
    if (scoring == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
    else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
    else return FieldError("scoring_func", "'" + scoring + "' is not supported (softmax, sigmoid)");
  }
  DS_RETURN_IF_ERROR(GetString(j, "topk_method", &topk));
  if (!topk.empty()) {
    if (topk == "greedy") c.topk_method = TopkMethod::kGreedy;
    else if (topk == "group_limited_greedy") c.topk_method = TopkMethod::kGroupLimitedGreedy;
    else if (topk == "noaux_tc") c.topk_method = TopkMethod::kNoauxTc;
    else return FieldError("topk_method", "'" + topk + "' is not supported (greedy, group_limited_greedy, noaux_tc)");
  }

  // RoPE: transformers 5 rope_parameters, else official rope_theta + rope_scaling.
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    DS_RETURN_IF_ERROR(ParseRopeDict(*it, "rope_parameters", &c.rope));
  } else {
    DS_RETURN_IF_ERROR(GetDouble(j, "rope_theta", &c.rope.theta));
    if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null())
      DS_RETURN_IF_ERROR(ParseRopeDict(*rs, "rope_scaling", &c.rope));
  }
  if (c.rope.theta <= 0) return FieldError("rope_theta", "must be > 0");
  if (c.rope.type == "yarn") {
    if (c.rope.factor <= 0) return FieldError("rope_scaling.factor", "must be > 0");
    if (c.rope.original_max_position_embeddings <= 0)
      c.rope.original_max_position_embeddings = c.max_position_embeddings;
  }

  // quantization_config.
  if (auto it = j.find("quantization_config"); it != j.end() && !it->is_null()) {
    const json& q = *it;
    if (!q.is_object()) return FieldError("quantization_config", "must be an object");
    std::string method, fmt;
    DS_RETURN_IF_ERROR(GetString(q, "quant_method", &method));
    if (method != "fp8")
      return FieldError("quantization_config.quant_method", "'" + method + "' is not supported (fp8)");
    DS_RETURN_IF_ERROR(GetString(q, "fmt", &fmt));
    if (!fmt.empty() && fmt != "e4m3")
      return FieldError("quantization_config.fmt", "'" + fmt + "' is not supported (e4m3)");
    DS_RETURN_IF_ERROR(GetString(q, "activation_scheme", &c.quant.activation_scheme));
    if (c.quant.activation_scheme != "dynamic")
      return FieldError("quantization_config.activation_scheme",
                        "'" + c.quant.activation_scheme + "' is not supported (dynamic)");
    if (auto b = q.find("weight_block_size"); b != q.end() && !b->is_null()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
          !(*b)[1].is_number_integer() || (*b)[0].get<int>() <= 0 || (*b)[1].get<int>() <= 0)
        return FieldError("quantization_config.weight_block_size", "must be two positive integers");
      c.quant.weight_block_size = {(*b)[0].get<int>(), (*b)[1].get<int>()};
    }
    c.quant.fp8 = true;
  }

  // Consistency.
  if (c.hidden_act != "silu") return FieldError("hidden_act", "'" + c.hidden_act + "' is not supported (silu)");
  if (c.qk_rope_head_dim % 2 != 0) return FieldError("qk_rope_head_dim", "must be even");
  if (c.rms_norm_eps <= 0) return FieldError("rms_norm_eps", "must be > 0");
  if (c.num_hidden_layers > 1024) return FieldError("num_hidden_layers", "is implausibly large");
  if (c.n_routed_experts > 0) {
    if (c.num_experts_per_tok <= 0)
      return FieldError("num_experts_per_tok", "is required (> 0) when n_routed_experts > 0");
    if (c.num_experts_per_tok > c.n_routed_experts)
      return FieldError("num_experts_per_tok", "must be <= n_routed_experts (" + std::to_string(c.n_routed_experts) + ")");
    if (c.n_routed_experts % c.n_group != 0)
      return FieldError("n_group", "must divide n_routed_experts (" + std::to_string(c.n_routed_experts) + ")");
    if (c.topk_group > c.n_group)
      return FieldError("topk_group", "must be <= n_group (" + std::to_string(c.n_group) + ")");
    const int per_group = c.n_routed_experts / c.n_group;
    if (c.topk_method != TopkMethod::kGreedy && c.num_experts_per_tok > c.topk_group * per_group)
      return FieldError("num_experts_per_tok", "exceeds the experts in topk_group groups");
    if (c.topk_method == TopkMethod::kNoauxTc && per_group < 2 && c.n_group > 1)
      return FieldError("n_group", "noaux_tc needs at least 2 experts per group");
    if (c.first_k_dense_replace > c.num_hidden_layers)
      return FieldError("first_k_dense_replace", "must be <= num_hidden_layers");
  }
  if (c.q_lora_rank < 0) return FieldError("q_lora_rank", "must be >= 0 or null");
  if (c.vocab_size <= 0) return FieldError("vocab_size", "must be > 0");
  for (int e : c.eos_token_ids)
    if (e < 0 || e >= c.vocab_size) return FieldError("eos_token_id", "is outside the vocabulary");
  if (c.bos_token_id >= c.vocab_size) return FieldError("bos_token_id", "is outside the vocabulary");
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "config.json";
  std::ifstream f(p);
  if (!f) return NotFound("cannot open " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(p.string() + ": not valid JSON");
  auto c = ParseModelConfig(j);
  if (!c.ok()) return Status(c.status().code(), p.string() + ": " + c.status().message());
  return c;
}

json ModelConfigToJson(const ModelConfig& c) {
  json j;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["scoring_func"] = ScoringFuncName(c.scoring_func);
  j["topk_method"] = TopkMethodName(c.topk_method);
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["rope"] = {{"type", c.rope.type}, {"theta", c.rope.theta}, {"factor", c.rope.factor},
               {"original_max_position_embeddings", c.rope.original_max_position_embeddings},
               {"beta_fast", c.rope.beta_fast}, {"beta_slow", c.rope.beta_slow},
               {"mscale", c.rope.mscale}, {"mscale_all_dim", c.rope.mscale_all_dim}};
  j["rope_interleave"] = c.rope_interleave;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["quantization"] = c.quant.fp8 ? "fp8_e4m3_block" : "none";
  if (c.quant.fp8) j["weight_block_size"] = c.quant.weight_block_size;
  j["softmax_scale"] = c.softmax_scale();
  return j;
}

}  // namespace ds
