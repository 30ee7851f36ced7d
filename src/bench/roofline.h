// Roofline model of one forward step of a DeepSeek-V2/V3-family model: the bytes a step must
// move (weights touched + latent KV cache) and the FLOPs it must do, from the ModelConfig and
// the step's shape. time = max(bytes / memory bandwidth, FLOPs / GEMM rate).
//
// Bytes (per step; every tensor read once, activations ignored):
// - per layer: input/post norms; MLA projections (q_proj, or q_a_proj + q_a_layernorm +
//   q_b_proj; kv_a_proj_with_mqa; kv_a_layernorm; kv_b_proj; o_proj);
// - dense layers: gate/up/down (3 x hidden x intermediate);
// - MoE layers: router gate [E, hidden] (+ bias), shared experts (3 x hidden x moe_inter x
//   n_shared), and the routed experts *touched* this step, D(T) x 3 x hidden x moe_inter, with
//     D(T) = E * (1 - (1 - k/E)^T)          (expected distinct experts)
//   for T tokens each routed to k distinct experts of E, every expert equally likely (each
//   token misses a given expert with probability 1 - k/E, independently of the other tokens).
//   Uniform routing is what dummy (random) weights give; trained routers are skewed, so D(T)
//   is an upper bound for real traffic at equal T. V3's group-limited routing keeps the
//   per-expert marginal k/E, so the same D(T) applies.
// - embedding: one row per new token; final norm; lm_head [vocab, hidden] when any logits row.
// - latent cache: per layer, each sequence reads context_len x latent_dim (decode, absorbed
//   form reads the cache in place; naive form gathers the cached prefix, context - new) and
//   writes new_tokens x latent_dim.
// Quantised linears (all MLA/MLP/expert projections) take `linear_bytes` per weight, plus a
// 4-byte fp32 scale per 128x128 block when fp8_block_scales; everything else
// (embedding, lm_head, router, norms) `other_bytes`.
//
// FLOPs (2 per multiply-add), per new token unless noted:
// - projections: 2 x weights of q, kv_a, o; kv_b: naive form 2 x kvl x H(nope+v) per
//   *context* token (each cached row is decompressed again), absorbed form the same count per
//   new token (W_UK folded into q, W_UV after attention);
// - attention core over the p+1 visible positions of a new token at position p: naive
//   2 x H x (qk_head + v_head) x (p+1); absorbed (MQA over the latent)
//   2 x H x (2 kv_lora + rope) x (p+1);
// - MLP: 2 x 3 x hidden x intermediate; MoE: router 2 x hidden x E, shared
//   2 x 3 x hidden x moe_inter x n_shared, routed 2 x 3 x hidden x moe_inter x k;
// - lm_head: 2 x hidden x vocab per logits row.
// Form per sequence as the CPU runner's MlaMode::kAuto: naive when it has > 1 new token.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace ds::bench {

struct RooflineDtypes {
  double linear_bytes = 2;       // 1 fp8, 2 bf16, 4 fp32
  bool fp8_block_scales = false; // + fp32 scale per 128x128 block of linear weights
  double kv_b_proj_bytes = 0;    // kv_b_proj element (no scales); 0 = as the other linears
  double router_bytes = 0;       // MoE router element; 0 = other_bytes
  double other_bytes = 2;        // embedding, lm_head, norms
  double kv_bytes = 2;           // latent cache element
};
// The dtypes a backend reads: cpu -> fp32 everywhere (the CPU runner dequantises to fp32);
// cuda (backend/cuda/cuda_runner.h) -> linears fp8 + block scales when the config is FP8,
// else bf16; kv_b_proj bf16 (it feeds both MLA forms); router fp32; embedding, lm_head and
// the latent cache bf16.
RooflineDtypes DtypesFor(const ModelConfig& cfg, bool cuda);

// One step: per sequence, new tokens and tokens in cache after the step.
struct StepShape {
  std::vector<int> new_tokens;
  std::vector<int> context_lens;
  int logits_rows = 0;  // rows of lm_head output (usually one per sequence)
  int total_new_tokens() const;
};
StepShape PrefillShape(int batch, int input_len);            // each sequence: input_len new
StepShape DecodeShape(int batch, int context_after_step);    // each sequence: 1 new token

// Expected distinct experts touched by `tokens` tokens routing to k of E (see above).
double ExpectedDistinctExperts(int num_experts, int top_k, double tokens);

struct StepCost {
  // Bytes.
  double attn_weight_bytes = 0, dense_weight_bytes = 0, moe_weight_bytes = 0;
  double embed_bytes = 0, lm_head_bytes = 0, kv_read_bytes = 0, kv_write_bytes = 0;
  // FLOPs.
  double attn_proj_flops = 0, attn_core_flops = 0, mlp_flops = 0, lm_head_flops = 0;
  double moe_flops = 0;  // the MoE layers' part of mlp_flops (router + shared + routed)
  double experts_touched_per_moe_layer = 0;
  double weight_bytes() const {
    return attn_weight_bytes + dense_weight_bytes + moe_weight_bytes + embed_bytes + lm_head_bytes;
  }
  double kv_bytes() const { return kv_read_bytes + kv_write_bytes; }
  double total_bytes() const { return weight_bytes() + kv_bytes(); }
  double total_flops() const { return attn_proj_flops + attn_core_flops + mlp_flops + lm_head_flops; }
};
StepCost EstimateStep(const ModelConfig& cfg, const StepShape& shape, const RooflineDtypes& dt);

struct Hardware {
  double mem_bw_gbps = 0;   // GB/s (1e9 bytes)
  double flops_tflops = 0;  // TFLOP/s (1e12)
};
struct RooflineTime {
  double memory_ms = 0, compute_ms = 0;
  double ms() const { return memory_ms > compute_ms ? memory_ms : compute_ms; }
  const char* bound() const { return memory_ms >= compute_ms ? "memory" : "compute"; }
};
RooflineTime RooflineTimeOf(const StepCost& c, const Hardware& hw);

// The step's roofline split by part of the model, each part timed on its own bytes and FLOPs
// (the parts' times add up to at least the whole step's): attention (MLA weights + latent
// cache; projections + core), MoE layers, dense MLP layers, and the rest (embedding rows,
// lm_head). For the "where the time goes per layer" analysis.
struct RooflineParts {
  RooflineTime attention, moe, dense, other;
};
RooflineParts RooflinePartsOf(const StepCost& c, const Hardware& hw);

nlohmann::json StepCostToJson(const StepCost& c, const RooflineTime& t);

}  // namespace ds::bench
