#include "bench/dummy_checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/dtype.h"
#include "model/config.h"

namespace ds::bench {
namespace {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  enum Kind { kWeight, kOnes, kZerosF32 } kind = kWeight;
};

void AddMlp(std::vector<TensorSpec>* t, const std::string& p, int64_t inter, int64_t hidden) {
  t->push_back({p + ".gate_proj.weight", {inter, hidden}});
  t->push_back({p + ".up_proj.weight", {inter, hidden}});
  t->push_back({p + ".down_proj.weight", {hidden, inter}});
}

std::vector<TensorSpec> Specs(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t V = c.vocab_size, Hd = c.hidden_size, H = c.num_attention_heads;
  const int64_t qk = c.qk_head_dim(), kvl = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  t.push_back({"model.embed_tokens.weight", {V, Hd}});
  t.push_back({"model.norm.weight", {Hd}, TensorSpec::kOnes});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {V, Hd}});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    t.push_back({p + ".input_layernorm.weight", {Hd}, TensorSpec::kOnes});
    t.push_back({p + ".post_attention_layernorm.weight", {Hd}, TensorSpec::kOnes});
    const std::string a = p + ".self_attn";
    if (c.q_lora_rank > 0) {
      t.push_back({a + ".q_a_proj.weight", {c.q_lora_rank, Hd}});
      t.push_back({a + ".q_a_layernorm.weight", {c.q_lora_rank}, TensorSpec::kOnes});
      t.push_back({a + ".q_b_proj.weight", {H * qk, c.q_lora_rank}});
    } else {
      t.push_back({a + ".q_proj.weight", {H * qk, Hd}});
    }
    t.push_back({a + ".kv_a_proj_with_mqa.weight", {kvl + rope, Hd}});
    t.push_back({a + ".kv_a_layernorm.weight", {kvl}, TensorSpec::kOnes});
    t.push_back({a + ".kv_b_proj.weight", {H * (c.qk_nope_head_dim + c.v_head_dim), kvl}});
    t.push_back({a + ".o_proj.weight", {Hd, H * c.v_head_dim}});
    const std::string m = p + ".mlp";
    if (c.is_moe_layer(l)) {
      t.push_back({m + ".gate.weight", {c.n_routed_experts, Hd}});
      if (c.topk_method == TopkMethod::kNoauxTc)
        t.push_back({m + ".gate.e_score_correction_bias", {c.n_routed_experts}, TensorSpec::kZerosF32});
      for (int e = 0; e < c.n_routed_experts; ++e)
        AddMlp(&t, m + ".experts." + std::to_string(e), c.moe_intermediate_size, Hd);
      if (c.n_shared_experts > 0)
        AddMlp(&t, m + ".shared_experts", static_cast<int64_t>(c.moe_intermediate_size) * c.n_shared_experts, Hd);
    } else {
      AddMlp(&t, m, c.intermediate_size, Hd);
    }
  }
  return t;
}

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Status WriteDummyCheckpoint(const nlohmann::json& config_json, int num_layers, const std::string& dir,
                            uint64_t seed, double init_std) {
  nlohmann::json cj = config_json;
  if (num_layers > 0) cj["num_hidden_layers"] = num_layers;
  cj.erase("quantization_config");
  cj["num_nextn_predict_layers"] = 0;  // no MTP weights written
  DS_ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(cj));
  {
    std::ofstream f(dir + "/config.json");
    if (!f) return NotFound("cannot write " + dir + "/config.json");
    f << cj.dump(2) << "\n";
  }
  auto specs = Specs(cfg);
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    uint64_t bytes = static_cast<uint64_t>(n) * (s.kind == TensorSpec::kZerosF32 ? 4 : 2);
    header[s.name] = {{"dtype", s.kind == TensorSpec::kZerosF32 ? "F32" : "BF16"},
                      {"shape", s.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}, {"dsinfer", "dummy weights"}};
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  if (!f) return NotFound("cannot write " + dir + "/model.safetensors");
  uint64_t hlen = h.size();
  f.write(reinterpret_cast<const char*>(&hlen), 8);  // little-endian hosts only (x86, arm64)
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  uint64_t state = seed ^ 0x6A09E667F3BCC909ull;
  const float a = static_cast<float>(init_std * std::sqrt(3.0));  // uniform [-a, a] has std init_std
  std::vector<uint16_t> buf;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    if (s.kind == TensorSpec::kZerosF32) {
      std::vector<float> z(n, 0.0f);
      f.write(reinterpret_cast<const char*>(z.data()), n * 4);
      continue;
    }
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      float v = 1.0f;
      if (s.kind == TensorSpec::kWeight) {
        double u = static_cast<double>(SplitMix(state) >> 11) * 0x1.0p-53;  // [0, 1)
        v = static_cast<float>((2 * u - 1) * a);
      }
      buf[i] = F32ToBf16(v);
    }
    f.write(reinterpret_cast<const char*>(buf.data()), n * 2);
  }
  if (!f) return Internal("write failed for " + dir + "/model.safetensors");
  return Status::Ok();
}

}  // namespace ds::bench
