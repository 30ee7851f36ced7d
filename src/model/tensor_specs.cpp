#include "model/tensor_specs.h"

#include <set>
#include <sstream>

#include "common/check.h"

namespace ds {

const char* WeightModuleName(WeightModule m) {
  switch (m) {
    case WeightModule::kEmbedding: return "embedding";
    case WeightModule::kAttention: return "attention";
    case WeightModule::kDenseMlp: return "dense_mlp";
    case WeightModule::kRoutedExperts: return "routed_experts";
    case WeightModule::kSharedExperts: return "shared_experts";
    case WeightModule::kGate: return "gate";
    case WeightModule::kNorm: return "norms";
    case WeightModule::kLmHead: return "lm_head";
    case WeightModule::kMtpProj: return "mtp_proj";
  }
  return "?";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DType CheckpointDType(const ModelConfig& c) {
  if (c.torch_dtype == "float32") return DType::kF32;
  if (c.torch_dtype == "float16") return DType::kF16;
  return DType::kBF16;
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Appends tensors with the layer/MTP context of one builder.
class Builder {
 public:
  Builder(const ModelConfig& c, std::vector<TensorSpec>* out) : c_(c), out_(out) {
    dt_ = CheckpointDType(c);
  }
  void SetLayer(int layer, bool mtp) { layer_ = layer; mtp_ = mtp; }

  // A plain (never quantized) tensor in the checkpoint dtype, or `dtype` if given.
  TensorSpec& Plain(std::string name, std::vector<int64_t> shape, WeightModule m) {
    return Add(std::move(name), std::move(shape), dt_, m);
  }
  TensorSpec& Add(std::string name, std::vector<int64_t> shape, DType dtype, WeightModule m) {
    TensorSpec t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.module = m;
    t.layer = layer_;
    t.mtp = mtp_;
    out_->push_back(std::move(t));
    return out_->back();
  }
  // A linear weight [out, in]: F8_E4M3 + `_scale_inv` F32 [ceil(out/bo), ceil(in/bi)] in FP8
  // checkpoints, else the checkpoint dtype.
  void Linear(const std::string& name, int64_t out, int64_t in, WeightModule m, int expert = -1) {
    if (!c_.quant.fp8) {
      Plain(name, {out, in}, m).expert = expert;
      return;
    }
    TensorSpec& w = Add(name, {out, in}, DType::kF8E4M3, m);
    w.quantized = true;
    w.expert = expert;
    const int64_t bo = c_.quant.weight_block_size[0], bi = c_.quant.weight_block_size[1];
    TensorSpec& s = Add(name + "_scale_inv", {CeilDiv(out, bo), CeilDiv(in, bi)}, DType::kF32, m);
    s.scale_inv = true;
    s.expert = expert;
  }

 private:
  const ModelConfig& c_;
  std::vector<TensorSpec>* out_;
  DType dt_;
  int layer_ = -1;
  bool mtp_ = false;
};

void AddMlp(Builder& b, const std::string& prefix, int64_t hidden, int64_t inter, WeightModule m,
            int expert = -1) {
  b.Linear(prefix + "gate_proj.weight", inter, hidden, m, expert);
  b.Linear(prefix + "up_proj.weight", inter, hidden, m, expert);
  b.Linear(prefix + "down_proj.weight", hidden, inter, m, expert);
}

void AddDecoderLayer(const ModelConfig& c, Builder& b, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  const DType bias_dt = CheckpointDType(c);
  using M = WeightModule;
  b.Plain(p + "input_layernorm.weight", {H}, M::kNorm);
  // MLA.
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    b.Linear(a + "q_a_proj.weight", c.q_lora_rank, H, M::kAttention);
    if (c.attention_bias) b.Add(a + "q_a_proj.bias", {c.q_lora_rank}, bias_dt, M::kAttention);
    b.Plain(a + "q_a_layernorm.weight", {c.q_lora_rank}, M::kNorm);
    b.Linear(a + "q_b_proj.weight", nh * c.qk_head_dim(), c.q_lora_rank, M::kAttention);
  } else {
    b.Linear(a + "q_proj.weight", nh * c.qk_head_dim(), H, M::kAttention);
  }
  b.Linear(a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, H, M::kAttention);
  if (c.attention_bias)
    b.Add(a + "kv_a_proj_with_mqa.bias", {c.kv_lora_rank + c.qk_rope_head_dim}, bias_dt, M::kAttention);
  b.Plain(a + "kv_a_layernorm.weight", {c.kv_lora_rank}, M::kNorm);
  b.Linear(a + "kv_b_proj.weight", nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank,
           M::kAttention);
  b.Linear(a + "o_proj.weight", H, nh * c.v_head_dim, M::kAttention);
  if (c.attention_bias) b.Add(a + "o_proj.bias", {H}, bias_dt, M::kAttention);
  b.Plain(p + "post_attention_layernorm.weight", {H}, M::kNorm);
  // MLP.
  if (!c.is_moe_layer(layer)) {
    AddMlp(b, p + "mlp.", H, c.intermediate_size, M::kDenseMlp);
    return;
  }
  const int64_t E = c.n_routed_experts;
  b.Plain(p + "mlp.gate.weight", {E, H}, M::kGate);
  if (c.topk_method == TopkMethod::kNoauxTc)
    b.Add(p + "mlp.gate.e_score_correction_bias", {E}, DType::kF32, M::kGate);
  for (int e = 0; e < E; ++e)
    AddMlp(b, p + "mlp.experts." + std::to_string(e) + ".", H, c.moe_intermediate_size,
           M::kRoutedExperts, e);
  if (c.n_shared_experts > 0)
    AddMlp(b, p + "mlp.shared_experts.", H,
           static_cast<int64_t>(c.moe_intermediate_size) * c.n_shared_experts, M::kSharedExperts);
}

void AddMtpLayer(const ModelConfig& c, Builder& b, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t H = c.hidden_size, V = c.vocab_size;
  using M = WeightModule;
  // Order as in the official checkpoint's last shard: the decoder layer, then the MTP extras.
  AddDecoderLayer(c, b, layer);
  b.Add(p + "embed_tokens.weight", {V, H}, CheckpointDType(c), M::kEmbedding).mtp_shared = true;
  b.Plain(p + "enorm.weight", {H}, M::kNorm);
  b.Plain(p + "hnorm.weight", {H}, M::kNorm);
  b.Add(p + "eh_proj.weight", {H, 2 * H}, CheckpointDType(c), M::kMtpProj);
  b.Plain(p + "shared_head.norm.weight", {H}, M::kNorm);
  b.Add(p + "shared_head.head.weight", {V, H}, CheckpointDType(c), M::kLmHead).mtp_shared = true;
}

}  // namespace

std::vector<TensorSpec> ExpectedLayerTensors(const ModelConfig& c, int layer) {
  DS_CHECK(layer >= 0 && layer < c.num_hidden_layers + c.num_nextn_predict_layers)
      << "layer " << layer << " of " << c.num_hidden_layers << "+" << c.num_nextn_predict_layers;
  std::vector<TensorSpec> out;
  Builder b(c, &out);
  const bool mtp = layer >= c.num_hidden_layers;
  b.SetLayer(layer, mtp);
  if (mtp) AddMtpLayer(c, b, layer);
  else AddDecoderLayer(c, b, layer);
  return out;
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c, bool include_mtp) {
  std::vector<TensorSpec> out;
  Builder b(c, &out);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  b.Plain("model.embed_tokens.weight", {V, H}, WeightModule::kEmbedding);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    b.SetLayer(l, false);
    AddDecoderLayer(c, b, l);
  }
  b.SetLayer(-1, false);
  b.Plain("model.norm.weight", {H}, WeightModule::kNorm);
  if (!c.tie_word_embeddings) b.Plain("lm_head.weight", {V, H}, WeightModule::kLmHead);
  if (include_mtp) {
    for (int k = 0; k < c.num_nextn_predict_layers; ++k) {
      const int l = c.num_hidden_layers + k;
      b.SetLayer(l, true);
      AddMtpLayer(c, b, l);
    }
  }
  return out;
}

namespace {
std::string Shape(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}
}  // namespace

TensorCheck CheckCheckpointTensors(const ModelConfig& c, const Checkpoint& ckpt) {
  TensorCheck r;
  r.has_mtp = c.num_nextn_predict_layers > 0 &&
              ckpt.Find("model.layers." + std::to_string(c.num_hidden_layers) + ".eh_proj.weight") !=
                  nullptr;
  const auto expected = ExpectedTensors(c, r.has_mtp);
  r.expected = expected.size();
  std::set<std::string> names;
  for (const TensorSpec& t : expected) {
    names.insert(t.name);
    const TensorView* v = ckpt.Find(t.name);
    if (v == nullptr) {
      r.missing.push_back(t.name);
      continue;
    }
    if (v->shape != t.shape)
      r.bad_shape.push_back(t.name + ": expected " + Shape(t.shape) + ", checkpoint has " + Shape(v->shape));
    if (v->dtype != t.dtype)
      r.other_dtype.push_back(t.name + ": expected " + DTypeName(t.dtype) + ", checkpoint has " +
                              DTypeName(v->dtype));
  }
  for (const std::string& n : ckpt.Names())
    if (!names.count(n)) r.unexpected.push_back(n);
  return r;
}

}  // namespace ds
