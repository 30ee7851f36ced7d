#include "model/model.h"

#include "backend/cpu/ops.h"
#include "common/check.h"
#include "common/logging.h"
#include "model/weights.h"

namespace ds {

StatusOr<std::unique_ptr<DeepseekModel>> DeepseekModel::Load(const ModelConfig& cfg, const Checkpoint& ckpt) {
  std::unique_ptr<DeepseekModel> m(new DeepseekModel(cfg));
  const int64_t V = cfg.vocab_size, Hd = cfg.hidden_size;
  const auto b = cfg.quant.weight_block_size;
  DS_ASSIGN_OR_RETURN(m->embed_, LoadTensorF32(ckpt, "model.embed_tokens.weight", {V, Hd}, b));
  DS_ASSIGN_OR_RETURN(m->norm_, LoadTensorF32(ckpt, "model.norm.weight", {Hd}, b));
  if (ckpt.Find("lm_head.weight") == nullptr && cfg.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    DS_ASSIGN_OR_RETURN(m->lm_head_, LoadTensorF32(ckpt, "lm_head.weight", {V, Hd}, b));
  }
  m->layers_.resize(cfg.num_hidden_layers);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    DecoderLayerWeights& L = m->layers_[l];
    DS_ASSIGN_OR_RETURN(L.input_norm, LoadTensorF32(ckpt, p + ".input_layernorm.weight", {Hd}, b));
    DS_ASSIGN_OR_RETURN(L.post_norm, LoadTensorF32(ckpt, p + ".post_attention_layernorm.weight", {Hd}, b));
    DS_RETURN_IF_ERROR(LoadMla(ckpt, cfg, p + ".self_attn", &L.attn));
    L.is_moe = cfg.is_moe_layer(l);
    if (L.is_moe) DS_RETURN_IF_ERROR(LoadMoe(ckpt, cfg, p + ".mlp", &L.moe));
    else DS_RETURN_IF_ERROR(LoadMlp(ckpt, cfg, p + ".mlp", cfg.intermediate_size, &L.mlp));
  }
  if (cfg.n_routed_experts > 0) m->expert_map_ = ExpertMap::Identity(cfg.num_hidden_layers, cfg.n_routed_experts);
  if (cfg.num_nextn_predict_layers > 0) {
    const std::string mtp = "model.layers." + std::to_string(cfg.num_hidden_layers) + ".eh_proj.weight";
    m->mtp_available_ = ckpt.Find(mtp) != nullptr;
    if (m->mtp_available_)
      DS_LOG(WARNING) << "checkpoint has MTP weights (num_nextn_predict_layers="
                      << cfg.num_nextn_predict_layers << "); MTP is not run by the CPU backend: off";
    else
      DS_LOG(WARNING) << "config sets num_nextn_predict_layers=" << cfg.num_nextn_predict_layers
                      << " but the checkpoint has no MTP weights (" << mtp << "): MTP off";
  }
  return m;
}

Status DeepseekModel::SetExpertMap(ExpertMap map) {
  if (cfg_.n_routed_experts <= 0) return InvalidArgument("expert map given, but the model has no routed experts");
  DS_RETURN_IF_ERROR(map.CheckFits(cfg_.num_hidden_layers, cfg_.n_routed_experts));
  expert_map_ = std::move(map);
  return Status::Ok();
}

void DeepseekModel::Forward(const ForwardBatch& batch, const std::vector<float*>& caches,
                            const RopeTables& rope, MlaMode mode, std::vector<float>* logits,
                            ExpertLoadRecorder* expert_load) const {
  const int64_t T = batch.num_tokens(), Hd = cfg_.hidden_size, V = cfg_.vocab_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  DS_CHECK_EQ(static_cast<int64_t>(caches.size()), static_cast<int64_t>(layers_.size()));
  // residual: [T, hidden] the residual stream; h: [T, hidden] normed input; o: [T, hidden]
  std::vector<float> residual(T * Hd), h(T * Hd), o(T * Hd);
  cpu::Embedding({batch.token_ids.data(), T, embed_.data(), V, Hd, residual.data()});
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecoderLayerWeights& L = layers_[l];
    // h = input_layernorm(residual)   (residual += previous MLP output done below)
    cpu::RmsNorm({residual.data(), Hd, nullptr, 0, L.input_norm.data(), h.data(), Hd, T, Hd, eps});
    MlaForward(cfg_, L.attn, rope, batch, mode, caches[l], h.data(), o.data());
    // residual += attn; h = post_attention_layernorm(residual)
    cpu::RmsNorm({o.data(), Hd, residual.data(), Hd, L.post_norm.data(), h.data(), Hd, T, Hd, eps});
    if (L.is_moe) MoeForward(cfg_, L.moe, h.data(), T, o.data(), {&expert_map_, static_cast<int>(l), expert_load});
    else MlpForward(L.mlp, h.data(), T, o.data(), /*accumulate=*/false);
    for (int64_t i = 0; i < T * Hd; ++i) residual[i] += o[i];
  }
  // Final norm and LM head on the requested rows only. sel: [R, hidden]
  const int64_t R = static_cast<int64_t>(batch.logits_indices.size());
  std::vector<float> sel(R * Hd);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = batch.logits_indices[r];
    std::copy(residual.begin() + t * Hd, residual.begin() + (t + 1) * Hd, sel.begin() + r * Hd);
  }
  cpu::RmsNorm({sel.data(), Hd, nullptr, 0, norm_.data(), sel.data(), Hd, R, Hd, eps});
  logits->assign(R * V, 0.0f);
  cpu::Gemm({sel.data(), Hd, lm_head_.data(), Hd, logits->data(), V, R, V, Hd, false});
}

}  // namespace ds
