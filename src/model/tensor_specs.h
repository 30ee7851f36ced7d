// The tensors a DeepSeek-V2/V3-family checkpoint holds, derived from its config alone: names
// and shapes exactly as in the official Hugging Face checkpoints (deepseek-ai/DeepSeek-V3,
// DeepSeek-V2-Lite), the dtype each is stored in, and which module it belongs to. Shared by the
// weight loader (what to load, with which shape), `dsinfer inspect` and the planner (bytes).
//
// Layout per decoder layer i (prefix "model.layers.<i>."):
//   input_layernorm.weight                      [hidden]
//   self_attn.q_a_proj.weight                   [q_lora_rank, hidden]          (q_lora_rank > 0)
//   self_attn.q_a_layernorm.weight              [q_lora_rank]
//   self_attn.q_b_proj.weight                   [heads * qk_head_dim, q_lora_rank]
//   self_attn.q_proj.weight                     [heads * qk_head_dim, hidden]   (q_lora_rank == 0)
//   self_attn.kv_a_proj_with_mqa.weight         [kv_lora_rank + qk_rope_head_dim, hidden]
//   self_attn.kv_a_layernorm.weight             [kv_lora_rank]
//   self_attn.kv_b_proj.weight                  [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
//   self_attn.o_proj.weight                     [hidden, heads * v_head_dim]
//   (attention_bias: q_a_proj.bias, kv_a_proj_with_mqa.bias, o_proj.bias [out])
//   post_attention_layernorm.weight             [hidden]
//   dense layer: mlp.{gate,up}_proj.weight [intermediate, hidden], mlp.down_proj.weight [hidden, intermediate]
//   MoE layer:   mlp.gate.weight [n_routed_experts, hidden]
//                mlp.gate.e_score_correction_bias [n_routed_experts]      (topk_method noaux_tc)
//                mlp.experts.<e>.{gate,up}_proj.weight [moe_intermediate, hidden], down_proj [hidden, moe_intermediate]
//                mlp.shared_experts.{gate,up,down}_proj.weight, intermediate = moe_intermediate * n_shared_experts
// Outside the layers: model.embed_tokens.weight [vocab, hidden], model.norm.weight [hidden],
// lm_head.weight [vocab, hidden] (absent when tie_word_embeddings).
//
// MTP (num_nextn_predict_layers = n, layers num_hidden_layers .. +n-1; DeepSeek-V3
// README_WEIGHTS.md): a full decoder layer as above (MoE if is_moe_layer) plus
//   embed_tokens.weight [vocab, hidden]      a stored copy of model.embed_tokens (shared)
//   enorm.weight, hnorm.weight [hidden]      RMSNorms of the embedding / the previous hidden state
//   eh_proj.weight [hidden, 2 * hidden]      projection of concat(enorm(emb), hnorm(h)); BF16 even in FP8 checkpoints
//   shared_head.norm.weight [hidden]         the MTP layer's own final norm
//   shared_head.head.weight [vocab, hidden]  a stored copy of lm_head (shared)
// The two copies are stored in the checkpoint (that is why it holds 685B = 671B + 14B) but
// carry the same values as the main model's tensors: `mtp_shared` marks them.
//
// Dtypes: FP8 checkpoints (quantization_config fp8) store every linear weight of attention,
// dense MLP, routed and shared experts as F8_E4M3 with a `<name>_scale_inv` F32 companion of
// shape [ceil(out/bo), ceil(in/bo)] (bo x bi = weight_block_size); embeddings, lm_head, norms,
// mlp.gate.weight and eh_proj stay BF16, e_score_correction_bias is F32. Non-FP8 checkpoints
// store everything in torch_dtype (bias: F32). The official V3 checkpoint has 91,991 tensors,
// 688,574,839,360 bytes; ExpectedTensors(v3, true) reproduces both (tests/model/test_param_count.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ds {

enum class WeightModule : uint8_t {
  kEmbedding,      // embed_tokens
  kAttention,      // MLA projections (q/kv/o); their norms are kNorm
  kDenseMlp,       // dense SwiGLU layers (layer < first_k_dense_replace)
  kRoutedExperts,  // mlp.experts.*
  kSharedExperts,  // mlp.shared_experts.*
  kGate,           // router: mlp.gate.weight, e_score_correction_bias
  kNorm,           // every RMSNorm weight
  kLmHead,         // lm_head, MTP shared_head.head
  kMtpProj,        // MTP eh_proj
};
constexpr int kNumWeightModules = 9;
// "embedding", "attention", "dense_mlp", "routed_experts", "shared_experts", "gate", "norms",
// "lm_head", "mtp_proj".
const char* WeightModuleName(WeightModule m);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;  // dtype as stored in the checkpoint
  WeightModule module = WeightModule::kAttention;
  int layer = -1;           // decoder layer (MTP layers continue the numbering); -1 outside layers
  int expert = -1;          // routed expert index, else -1
  bool mtp = false;         // belongs to an MTP layer
  bool mtp_shared = false;  // MTP copy of model.embed_tokens / lm_head (same values)
  bool quantized = false;   // an F8_E4M3 weight with a `<name>_scale_inv` companion
  bool scale_inv = false;   // this is such a companion (F32 block scales, not a parameter)

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
};

// Dtype of the unquantized tensors for a config: torch_dtype "bfloat16" | "float16" | "float32"
// (anything else: BF16).
DType CheckpointDType(const ModelConfig& c);

// Every tensor of the checkpoint, in a fixed order: embed_tokens, layers 0..L-1 (attention,
// norms, MLP), model.norm, lm_head, then (include_mtp) the MTP layers. A quantized weight is
// immediately followed by its `_scale_inv` companion.
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c, bool include_mtp);

// The tensors of one decoder layer (main or MTP index), same conventions.
std::vector<TensorSpec> ExpectedLayerTensors(const ModelConfig& c, int layer);

// A checkpoint's tensors compared with ExpectedTensors (headers only; no data is read). MTP
// tensors are expected only if the checkpoint has `model.layers.<L>.eh_proj.weight` (MTP
// weights are optional). Each message names the tensor and both shapes / dtypes.
struct TensorCheck {
  bool has_mtp = false;
  size_t expected = 0;                  // tensors expected
  std::vector<std::string> missing;     // expected, absent
  std::vector<std::string> unexpected;  // present, not expected
  std::vector<std::string> bad_shape;   // present with another shape
  std::vector<std::string> other_dtype; // present with another dtype (e.g. F32 fixtures): a note
  bool ok() const { return missing.empty() && unexpected.empty() && bad_shape.empty(); }
};
TensorCheck CheckCheckpointTensors(const ModelConfig& c, const Checkpoint& ckpt);

}  // namespace ds
