#include "bench/roofline.h"

#include <algorithm>
#include <cmath>

namespace ds::bench {

RooflineDtypes DtypesFor(const ModelConfig& cfg, bool cuda) {
  RooflineDtypes d;
  if (!cuda) {
    d.linear_bytes = d.other_bytes = d.kv_bytes = 4;
    return d;
  }
  d.linear_bytes = cfg.quant.fp8 ? 1 : 2;
  d.fp8_block_scales = cfg.quant.fp8;
  d.kv_b_proj_bytes = 2;
  d.router_bytes = 4;
  d.other_bytes = 2;
  d.kv_bytes = 2;
  return d;
}

int StepShape::total_new_tokens() const {
  int t = 0;
  for (int n : new_tokens) t += n;
  return t;
}

StepShape PrefillShape(int batch, int input_len) {
  StepShape s;
  s.new_tokens.assign(batch, input_len);
  s.context_lens.assign(batch, input_len);
  s.logits_rows = batch;
  return s;
}

StepShape DecodeShape(int batch, int context_after_step) {
  StepShape s;
  s.new_tokens.assign(batch, 1);
  s.context_lens.assign(batch, context_after_step);
  s.logits_rows = batch;
  return s;
}

double ExpectedDistinctExperts(int num_experts, int top_k, double tokens) {
  if (num_experts <= 0 || top_k <= 0 || tokens <= 0) return 0;
  double miss = 1.0 - static_cast<double>(std::min(top_k, num_experts)) / num_experts;
  return num_experts * (1.0 - std::pow(miss, tokens));
}

namespace {
// Bytes of a quantised linear weight [out, in].
double LinearBytes(double out, double in, const RooflineDtypes& dt) {
  double b = out * in * dt.linear_bytes;
  if (dt.fp8_block_scales) b += std::ceil(out / 128) * std::ceil(in / 128) * 4;
  return b;
}
}  // namespace

StepCost EstimateStep(const ModelConfig& c, const StepShape& shape, const RooflineDtypes& dt) {
  StepCost r;
  const double Hd = c.hidden_size, H = c.num_attention_heads, ql = c.q_lora_rank, kvl = c.kv_lora_rank;
  const double rope = c.qk_rope_head_dim, nope = c.qk_nope_head_dim, vd = c.v_head_dim;
  const double qk = nope + rope, latent = kvl + rope;
  const double T = shape.total_new_tokens();
  const int L = c.num_hidden_layers;

  // Attention weights of one layer (elements of each projection).
  double q_elems = ql > 0 ? (Hd * ql + ql * H * qk) : Hd * H * qk;
  double attn_bytes_layer = (ql > 0 ? LinearBytes(ql, Hd, dt) + LinearBytes(H * qk, ql, dt) + ql * dt.other_bytes
                                    : LinearBytes(H * qk, Hd, dt)) +
                            LinearBytes(latent, Hd, dt) + kvl * dt.other_bytes +
                            (dt.kv_b_proj_bytes > 0 ? H * (nope + vd) * kvl * dt.kv_b_proj_bytes
                                                    : LinearBytes(H * (nope + vd), kvl, dt)) +
                            LinearBytes(Hd, H * vd, dt) +
                            2 * Hd * dt.other_bytes;  // input + post-attention norms
  double proj_flops_per_token = 2 * (q_elems + Hd * latent + H * vd * Hd);
  double kvb_flops_per_row = 2 * kvl * H * (nope + vd);

  // Per-layer attention FLOPs and KV traffic (identical for every layer).
  double core = 0, kvb = 0, kv_read_rows = 0, kv_write_rows = 0;
  for (size_t s = 0; s < shape.new_tokens.size(); ++s) {
    double n = shape.new_tokens[s], ctx = shape.context_lens[s];
    if (n <= 0) continue;
    bool naive = n > 1;
    // Sum over the new tokens of the positions visible to each: (ctx-n+1) + ... + ctx.
    double visible = n * (2 * ctx - n + 1) / 2;
    if (naive) {
      core += 2 * H * (qk + vd) * visible;
      kvb += kvb_flops_per_row * ctx;
      kv_read_rows += ctx - n;  // the cached prefix is gathered; new rows come from registers
    } else {
      core += 2 * H * (2 * kvl + rope) * visible;
      kvb += kvb_flops_per_row * n;
      kv_read_rows += ctx;
    }
    kv_write_rows += n;
  }

  double experts = c.n_routed_experts > 0 ? ExpectedDistinctExperts(c.n_routed_experts, c.num_experts_per_tok, T) : 0;
  r.experts_touched_per_moe_layer = experts;
  const double mi = c.moe_intermediate_size;
  for (int l = 0; l < L; ++l) {
    r.attn_weight_bytes += attn_bytes_layer;
    r.attn_proj_flops += proj_flops_per_token * T + kvb;
    r.attn_core_flops += core;
    r.kv_read_bytes += kv_read_rows * latent * dt.kv_bytes;
    r.kv_write_bytes += kv_write_rows * latent * dt.kv_bytes;
    if (c.is_moe_layer(l)) {
      const double E = c.n_routed_experts, shared_inter = mi * c.n_shared_experts;
      r.moe_weight_bytes += E * Hd * (dt.router_bytes > 0 ? dt.router_bytes : dt.other_bytes) + E * 4 /*bias*/ +
                            (shared_inter > 0 ? 2 * LinearBytes(shared_inter, Hd, dt) + LinearBytes(Hd, shared_inter, dt) : 0) +
                            experts * (2 * LinearBytes(mi, Hd, dt) + LinearBytes(Hd, mi, dt));
      const double f = T * 2 * (Hd * E + 3 * Hd * shared_inter + 3 * Hd * mi * c.num_experts_per_tok);
      r.mlp_flops += f;
      r.moe_flops += f;
    } else {
      const double I = c.intermediate_size;
      r.dense_weight_bytes += 2 * LinearBytes(I, Hd, dt) + LinearBytes(Hd, I, dt);
      r.mlp_flops += T * 2 * 3 * Hd * I;
    }
  }
  r.embed_bytes = T * Hd * dt.other_bytes;
  if (shape.logits_rows > 0) {
    r.lm_head_bytes = (static_cast<double>(c.vocab_size) * Hd + Hd) * dt.other_bytes;
    r.lm_head_flops = 2.0 * Hd * c.vocab_size * shape.logits_rows;
  }
  return r;
}

RooflineTime RooflineTimeOf(const StepCost& c, const Hardware& hw) {
  RooflineTime t;
  if (hw.mem_bw_gbps > 0) t.memory_ms = c.total_bytes() / (hw.mem_bw_gbps * 1e9) * 1e3;
  if (hw.flops_tflops > 0) t.compute_ms = c.total_flops() / (hw.flops_tflops * 1e12) * 1e3;
  return t;
}

RooflineParts RooflinePartsOf(const StepCost& c, const Hardware& hw) {
  auto time = [&](double bytes, double flops) {
    RooflineTime t;
    if (hw.mem_bw_gbps > 0) t.memory_ms = bytes / (hw.mem_bw_gbps * 1e9) * 1e3;
    if (hw.flops_tflops > 0) t.compute_ms = flops / (hw.flops_tflops * 1e12) * 1e3;
    return t;
  };
  RooflineParts p;
  p.attention = time(c.attn_weight_bytes + c.kv_bytes(), c.attn_proj_flops + c.attn_core_flops);
  p.moe = time(c.moe_weight_bytes, c.moe_flops);
  p.dense = time(c.dense_weight_bytes, c.mlp_flops - c.moe_flops);
  p.other = time(c.embed_bytes + c.lm_head_bytes, c.lm_head_flops);
  return p;
}

nlohmann::json StepCostToJson(const StepCost& c, const RooflineTime& t) {
  return {{"weight_bytes", c.weight_bytes()},
          {"attn_weight_bytes", c.attn_weight_bytes},
          {"dense_weight_bytes", c.dense_weight_bytes},
          {"moe_weight_bytes", c.moe_weight_bytes},
          {"embed_bytes", c.embed_bytes},
          {"lm_head_bytes", c.lm_head_bytes},
          {"kv_read_bytes", c.kv_read_bytes},
          {"kv_write_bytes", c.kv_write_bytes},
          {"total_bytes", c.total_bytes()},
          {"attn_proj_flops", c.attn_proj_flops},
          {"attn_core_flops", c.attn_core_flops},
          {"mlp_flops", c.mlp_flops},
          {"moe_flops", c.moe_flops},
          {"lm_head_flops", c.lm_head_flops},
          {"total_flops", c.total_flops()},
          {"experts_touched_per_moe_layer", c.experts_touched_per_moe_layer},
          {"memory_ms", t.memory_ms},
          {"compute_ms", t.compute_ms},
          {"roofline_ms", t.ms()},
          {"bound", t.bound()}};
}

}  // namespace ds::bench
