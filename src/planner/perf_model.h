// Performance and memory model of DeepSeek-V3-family serving (prefill and decode instances).
//
// Per device and per layer, every module's time is a roofline:
//   t = max(FLOPs / (peak[dtype] x gemm_mfu [x mla_attention]), bytes / (HBM bw x bandwidth))
// and communication is bytes / (link bw x comm) + latency, with the traffic derived from the
// layout (all-to-all dispatch/combine or hierarchical AllGather + ReduceScatter). With
// micro-batch overlap the layer runs as two half batches:
//   layer = max(C, M) + (1 - overlap) x min(C, M),  C = 2 C(B/2), M = 2 M(B/2)
// (so weights are read twice and latencies paid twice: the real cost of two-batch overlap).
// Two mechanisms come from the workload, not from fitted factors:
//  * DP-attention straggler (SYSTEM.md sec. 4): every rank waits for the slowest at the MoE
//    dispatch, so attention time x (1 + z(dp) x cv(sum of contexts on a rank)), where z(n) is
//    the expected maximum of n standard normals and the context-length spread comes from the
//    workload's length CVs and the uniform progress through the output.
//  * Expert load imbalance: expert GEMMs (and all-to-all traffic, which follows the routing)
//    x the max/mean EP-rank load: layout.expert_imbalance, else 1.10 with redundant experts
//    (EPLB) and 1.25 without, times the statistical spread 1 + z(ep)/sqrt(rows per rank).
// Element-wise work (norms, RoPE, residual adds, activation quantisation, SiLU x up, the
// weighted combine of top-k outputs, naive-MLA decompressed K/V in prefill) is charged as HBM
// traffic per token per layer (ElementwiseBytesPerToken).
// Every assumption is listed in docs/design/planner.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.h"
#include "planner/deployment.h"
#include "planner/hardware.h"
#include "planner/model_size.h"

namespace ds::planner {

// Weight and KV memory per device, bytes.
struct MemoryBreakdown {
  double attention = 0, dense_ffn = 0, routed_experts = 0, shared_experts = 0, router_norms = 0;
  double embedding = 0, lm_head = 0, mtp = 0, reserved = 0;
  double weights() const {
    return attention + dense_ffn + routed_experts + shared_experts + router_norms + embedding + lm_head + mtp;
  }
  double hbm = 0;
  double kv_free = 0;              // hbm - weights - reserved (may be negative: does not fit)
  double kv_bytes_per_token = 0;   // latent cache per token held on this device (all its layers)
  double kv_capacity_tokens = 0;   // kv_free / kv_bytes_per_token
  double kv_needed_tokens = 0;     // what the evaluated batch needs
  double experts_per_device = 0;
};

// One layer's time on one device, microseconds, by module. `total` applies the overlap rule.
struct LayerTime {
  double mla_proj = 0;   // MLA projections (q_a, q_b, kv_a, kv_b / absorbed W_UK, W_UV, o)
  double mla_core = 0;   // attention over the cache (absorbed MQA in decode, causal naive in prefill)
  double attn_comm = 0;  // TP attention all-reduce / reduce-scatter (prefill attention TP)
  double moe_gemm = 0;   // routed-expert grouped GEMMs + router
  double shared = 0;     // shared expert(s) computed locally
  double dense = 0;      // dense FFN (first_k_dense_replace layers)
  double dispatch = 0;   // all-to-all dispatch, or AllGather
  double combine = 0;    // all-to-all combine, or ReduceScatter
  double dense_comm = 0; // dense FFN TP AllGather + ReduceScatter inside the node
  double elementwise = 0;  // norms, RoPE, residuals, activation quantisation, SiLU, top-k, combine sums (HBM-bound)
  double overhead = 0;     // per-layer fixed overhead
  double compute() const { return mla_proj + mla_core + moe_gemm + shared + dense + elementwise; }
  double comm() const { return attn_comm + dispatch + combine + dense_comm; }
  double total = 0;
};

struct RoleResult {
  Role role = Role::kDecode;
  InstanceLayout layout;
  bool feasible = false;
  std::string why_infeasible;
  // decode: requests per device; prefill: prompts per batch for the instance.
  double batch = 0;
  double concurrency_per_device = 0;  // requests in flight per device
  double tpot_ms = 0, ttft_ms = 0;
  double step_ms = 0;                 // decode step; prefill: time between batches (per stage, pipelined)
  double per_device_tok_s = 0;        // decode: output tok/s; prefill: input tok/s (incl. prefix hits)
  double tok_s_per_user = 0;          // decode: 1000 / tpot_ms
  double accepted_tokens_per_step = 1;
  double straggler = 1, expert_imbalance = 1;
  LayerTime moe_layer, dense_layer;
  double mtp_ms = 0, lm_head_ms = 0, overhead_ms = 0, kv_transfer_ms = 0;
  int chunks = 1;                     // prefill: sequence chunks pipelined through pp stages
  int n_moe_layers = 0, n_dense_layers = 0;
  MemoryBreakdown memory;
  std::string bottleneck;             // the largest contributor, in words
};

// Everything the model needs, resolved once.
struct PlanContext {
  ModelConfig config;
  ModuleShapes shapes;
  HardwareProfile hw;
  Workload workload;
  Slo slo;
};
PlanContext MakeContext(const ModelConfig& c, const HardwareProfile& hw, const Workload& w, const Slo& s);

// Evaluates one role at a fixed batch (layout.batch must be > 0).
RoleResult EvaluateDecode(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout);
RoleResult EvaluatePrefill(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout);
// Same, but when layout.batch == 0 picks the largest batch that fits memory and meets the SLO
// (TPOT for decode, TTFT for prefill). Infeasible when even batch 1 misses.
RoleResult EvaluateRole(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout);

// Bytes of element-wise HBM traffic per token per layer (bf16 activations): 12 x hidden for
// two RMSNorms and two residual adds, 2 x heads x qk_head_dim for the query (+ RoPE), 2 x
// heads x v_head_dim for the attention output, (topk + n_shared) x 3 x moe_intermediate for
// gate/up outputs and SiLU x up, topk x hidden for the weighted combine; prefill adds the
// decompressed K/V (heads x (qk_nope + v) written and read). Each element 2 bytes.
double ElementwiseBytesPerToken(const ModelConfig& c, bool prefill);

// The "theoretical" decode estimate of SYSTEM.md sec. 3 (Huawei's CloudMatrix-384 plan):
// every layer (main + MTP) costs, per device,
//   B x q x ctx x (latent + kv_lora) x heads x 2 / (peak_bf16 x gemm_mfu x mla_attention)
//   + (this device's weights of the layer) / (HBM bw x bandwidth)
// with communication, imbalance and overheads assumed hidden; B is the largest batch whose
// step, TPOT x accepted tokens per step, fits. Returns output tok/s per device (B / TPOT);
// *batch_out gets B. Derivation in docs/design/planner.md.
double TheoreticalDecodeTokS(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout,
                             double tpot_ms, double* batch_out = nullptr);

// Expected maximum of n independent standard normals (Blom's approximation; 0 for n <= 1).
double ExpectedMaxNormal(int n);

nlohmann::json RoleResultToJson(const RoleResult& r);
nlohmann::json MemoryToJson(const MemoryBreakdown& m);
nlohmann::json LayerTimeToJson(const LayerTime& t);

}  // namespace ds::planner
