// Parameter and byte counts of a DeepSeek-V2/V3-family model, per module, for the planner.
//
// The parameter count lives in ONE function, CountModuleShapes(), so that it can later be
// replaced by the shared src/model/param_count (being written for `dsinfer inspect`); the
// rest of the planner only uses ModuleShapes and the byte helpers below.
//
// Facts it reproduces for DeepSeek-V3 (tests/planner/test_model_size.cpp):
//   671.03B parameters excluding MTP, 37.55B activated per token (embedding + LM head
//   included; 36.6B without the embedding table), latent cache 576 x 2 B x 61 = 70,272 B per
//   token in bf16, one routed expert across the 58 MoE layers 3*7168*2048*58 B + fp32 block
//   scales = 2,554,954,752 B in FP8, embedding / LM head 129280 x 7168 x 2 B = 1.726 GiB each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace ds::planner {

// Storage type of weights or of the latent cache.
enum class WType { kBF16, kFP8, kINT8 };
const char* WTypeName(WType t);
StatusOr<WType> ParseWType(const std::string& s);  // "bf16" | "fp8" | "int8"
double WTypeBytes(WType t);                        // bytes per element (2, 1, 1)

// One linear layer: weight [out, in] (PyTorch layout), `count` copies.
struct Linear {
  std::string name;
  int64_t in = 0, out = 0, count = 1;
  int64_t params() const { return in * out * count; }
  // Bytes in `t`, with its quantisation scales: FP8 -> one fp32 per 128x128 block
  // (DeepSeek-V3 `weight_scale_inv`); INT8 -> one fp32 per output channel (W8A8); bf16 none.
  int64_t bytes(WType t) const;
};

// A module: linears (quantisable) + vectors kept in bf16 (norms, biases).
struct Module {
  std::vector<Linear> linears;
  int64_t vector_params = 0;  // RMSNorm weights etc., stored bf16
  int64_t params() const;
  int64_t bytes(WType t) const;
  int64_t linear_params() const;
};

// The model by module. Per-layer modules are per ONE layer.
struct ModuleShapes {
  int n_layers = 0;        // num_hidden_layers (61)
  int n_dense_layers = 0;  // layers with a dense FFN (3)
  int n_moe_layers = 0;    // MoE layers (58)
  int n_mtp_layers = 0;    // num_nextn_predict_layers (1)
  int n_routed = 0, n_shared = 0, topk = 0;
  Module attention;        // MLA: q_a, q_b (or q), kv_a, kv_b, o + q/kv norms + 2 layer norms
  Module dense_ffn;        // gate/up/down of intermediate_size
  Module routed_expert;    // ONE routed expert (gate/up/down of moe_intermediate_size)
  Module shared_experts;   // all shared experts of one layer
  Module router;           // gate weight [n_routed, hidden] (+ correction bias); kept bf16
  Module embedding;        // [vocab, hidden], bf16
  Module lm_head;          // [vocab, hidden], bf16
  Module final_norm;
  Module mtp_extra;        // per MTP layer: eh_proj [hidden, 2*hidden] + enorm/hnorm/shared_head.norm
};

// THE parameter-count function (see the header comment). Pure function of the config.
ModuleShapes CountModuleShapes(const ModelConfig& c);

// Totals (excluding MTP unless named).
int64_t TotalParams(const ModuleShapes& m);
int64_t ActivatedParams(const ModuleShapes& m);  // per token: attention, dense, top-k + shared experts, router, embedding, head
int64_t MtpParams(const ModuleShapes& m);        // the MTP layers (their own block + eh_proj; embedding/head shared)

// Latent cache bytes per token over all `layers` layers: (kv_lora_rank + qk_rope_head_dim) x
// bytes; FP8 adds one fp32 scale per token per layer (per-token quantisation).
int64_t LatentCacheBytesPerToken(const ModelConfig& c, WType kv, int layers);

}  // namespace ds::planner
