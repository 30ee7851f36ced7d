#include "runtime/dummy_checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "model/config.h"

namespace ds {

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  int kind;  // 0 random (fan_in = shape[1]), 1 ones, 2 zeros, 3 random embedding
};

}  // namespace

StatusOr<std::string> MakeScratchDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return Internal("cannot create a scratch directory under " + tmpl);
  return std::string(buf.data());
}

Status WriteDummyCheckpoint(const nlohmann::json& config_json, uint64_t seed, const std::string& out_dir) {
  nlohmann::json cj = config_json;
  cj.erase("quantization_config");
  cj["num_nextn_predict_layers"] = 0;
  DS_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(cj));
  const int64_t H = c.hidden_size, V = c.vocab_size, heads = c.num_attention_heads;
  std::vector<Spec> specs;
  specs.push_back({"model.embed_tokens.weight", {V, H}, 3});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    specs.push_back({p + ".input_layernorm.weight", {H}, 1});
    specs.push_back({p + ".post_attention_layernorm.weight", {H}, 1});
    const std::string a = p + ".self_attn";
    if (c.q_lora_rank > 0) {
      specs.push_back({a + ".q_a_proj.weight", {c.q_lora_rank, H}, 0});
      specs.push_back({a + ".q_a_layernorm.weight", {c.q_lora_rank}, 1});
      specs.push_back({a + ".q_b_proj.weight", {heads * c.qk_head_dim(), c.q_lora_rank}, 0});
    } else {
      specs.push_back({a + ".q_proj.weight", {heads * c.qk_head_dim(), H}, 0});
    }
    specs.push_back({a + ".kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}, 0});
    specs.push_back({a + ".kv_a_layernorm.weight", {c.kv_lora_rank}, 1});
    specs.push_back({a + ".kv_b_proj.weight", {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, 0});
    specs.push_back({a + ".o_proj.weight", {H, heads * c.v_head_dim}, 0});
    const std::string m = p + ".mlp";
    if (c.is_moe_layer(l)) {
      const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
      specs.push_back({m + ".gate.weight", {E, H}, 0});
      if (c.topk_method == TopkMethod::kNoauxTc) specs.push_back({m + ".gate.e_score_correction_bias", {E}, 2});
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = m + ".experts." + std::to_string(e);
        specs.push_back({x + ".gate_proj.weight", {I, H}, 0});
        specs.push_back({x + ".up_proj.weight", {I, H}, 0});
        specs.push_back({x + ".down_proj.weight", {H, I}, 0});
      }
      if (c.n_shared_experts > 0) {
        const int64_t S = I * c.n_shared_experts;
        specs.push_back({m + ".shared_experts.gate_proj.weight", {S, H}, 0});
        specs.push_back({m + ".shared_experts.up_proj.weight", {S, H}, 0});
        specs.push_back({m + ".shared_experts.down_proj.weight", {H, S}, 0});
      }
    } else {
      const int64_t I = c.intermediate_size;
      specs.push_back({m + ".gate_proj.weight", {I, H}, 0});
      specs.push_back({m + ".up_proj.weight", {I, H}, 0});
      specs.push_back({m + ".down_proj.weight", {H, I}, 0});
    }
  }
  specs.push_back({"model.norm.weight", {H}, 1});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {V, H}, 0});

  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    header[s.name] = {{"dtype", "BF16"}, {"shape", s.shape}, {"data_offsets", {offset, offset + 2 * n}}};
    offset += 2 * n;
  }
  header["__metadata__"] = {{"format", "pt"}, {"dsinfer", "dummy"}};
  std::string hs = header.dump();
  while (hs.size() % 8) hs.push_back(' ');
  std::ofstream out(out_dir + "/model.safetensors", std::ios::binary);
  if (!out) return Internal("cannot write " + out_dir + "/model.safetensors");
  const uint64_t hlen = hs.size();
  out.write(reinterpret_cast<const char*>(&hlen), 8);
  out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  std::vector<uint16_t> buf;
  for (size_t si = 0; si < specs.size(); ++si) {
    const Spec& s = specs[si];
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    buf.resize(n);
    const float scale = s.kind == 3 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(s.shape.size() > 1 ? s.shape[1] : 1));
    const uint64_t base = Mix(seed ^ Mix(si + 1));
    for (int64_t i = 0; i < n; ++i) {
      float v;
      if (s.kind == 1) v = 1.0f;
      else if (s.kind == 2) v = 0.0f;
      else v = (static_cast<float>(Mix(base + static_cast<uint64_t>(i)) >> 40) * (2.0f / 16777216.0f) - 1.0f) * scale;
      buf[i] = ToBf16(v);
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(2 * n));
  }
  if (!out) return Internal("write failed: " + out_dir + "/model.safetensors");
  std::ofstream cfg_out(out_dir + "/config.json");
  cfg_out << cj.dump(1);
  if (!cfg_out) return Internal("cannot write " + out_dir + "/config.json");
  return Status::Ok();
}

}  // namespace ds
