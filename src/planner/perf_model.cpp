#include "planner/perf_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

namespace ds::planner {
namespace {

using json = nlohmann::json;

constexpr double kResidualImbalanceEplb = 1.10;    // max/mean EP-rank load with redundant experts
constexpr double kResidualImbalanceNoEplb = 1.25;  // without replicas
constexpr double kMaxPrefillTokensPerDevice = 32768;  // activation memory cap per forward
constexpr double kMaxDecodeRequestsPerDevice = 2048;

// Standard normal quantile by bisection on erfc (enough for z(n) with n <= 1e6).
double NormalQuantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 100; ++i) {
    double mid = 0.5 * (lo + hi);
    double cdf = 0.5 * std::erfc(-mid / std::sqrt(2.0));
    (cdf < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Roofline time in microseconds.
double RooflineUs(const HardwareProfile& hw, double flops, double bytes, double peak_tflops, double compute_eff) {
  const double tc = flops / (peak_tflops * 1e12 * compute_eff);
  const double tm = bytes / (hw.hbm_bw_gbs * 1e9 * hw.eff.bandwidth);
  return std::max(tc, tm) * 1e6;
}

// Bytes per token of a dispatched activation: FP8/INT8 values + one fp32 scale per 128
// channels (DeepSeek's per-token-per-128 quantisation), or bf16.
double ActBytes(int hidden, WType w) {
  return w == WType::kBF16 ? 2.0 * hidden : hidden + std::ceil(hidden / 128.0) * 4.0;
}

struct Resolved {
  const PlanContext& ctx;
  const Deployment& dep;
  InstanceLayout l;
  int local = 8;         // ranks of the instance's stage that share the scale-up fabric
  int nodes = 1;         // scale-up domains the stage spans
  int ep_total = 1;      // routed + shared-expert ranks
  double experts_per_rank = 1;
  int dense_tp = 1, head_tp = 1;
};

Resolved Resolve(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout) {
  Resolved r{ctx, dep, layout};
  const int g = layout.stage_devices();
  r.ep_total = g;
  r.local = g <= ctx.hw.scale_up_devices ? g : std::min(ctx.hw.devices_per_node, g);
  r.nodes = (g + r.local - 1) / r.local;
  const int ep = std::max(1, layout.ep());
  r.experts_per_rank = std::ceil(static_cast<double>(ctx.shapes.n_routed + layout.redundant_experts) / ep);
  const int node = std::min(ctx.hw.devices_per_node, g);
  r.dense_tp = layout.dense_tp > 0 ? layout.dense_tp : (layout.role == Role::kDecode ? node : 1);
  r.head_tp = layout.lm_head_tp > 0 ? layout.lm_head_tp : node;
  r.l.dense_tp = r.dense_tp;
  r.l.lm_head_tp = r.head_tp;
  return r;
}

// MoE communication for `t_dev` tokens leaving each device. Returns {dispatch|AG, combine|RS}.
std::pair<double, double> MoeCommUs(const Resolved& r, double t_dev, double imbalance) {
  const auto& hw = r.ctx.hw;
  const int E = r.ep_total;
  if (E <= 1 || t_dev <= 0) return {0, 0};
  const double h = r.ctx.config.hidden_size;
  const double act = ActBytes(r.ctx.config.hidden_size, r.dep.weight_dtype);
  const double out = 2.0 * h;  // combine / reduce-scatter in bf16
  const double intra_bw = hw.intra_bw_gbs * 1e9 * hw.eff.comm;
  const double inter_bw = hw.inter_bw_gbs * 1e9 * hw.eff.comm;
  if (r.l.moe_comm == MoeComm::kAllToAll) {
    // Distinct destination ranks per token: each routed rank holds m of n experts; a token's
    // top-k hits a rank with probability 1 - (1 - m/n)^k. Dedicated shared-expert ranks add one.
    const double n = r.ctx.shapes.n_routed, k = r.ctx.shapes.topk, m = r.experts_per_rank;
    const int ep = r.l.ep();
    double d = ep * (1.0 - std::pow(std::max(0.0, 1.0 - m / n), k));
    if (r.l.shared_expert_devices > 0) d += 1.0;
    const double f_intra = static_cast<double>(r.local - 1) / E;
    const double f_inter = static_cast<double>(E - r.local) / E;
    auto one = [&](double bytes_per_token) {
      const double bytes = t_dev * d * bytes_per_token;
      const double t = std::max(bytes * f_intra / intra_bw, bytes * f_inter / inter_bw) * imbalance;
      return t * 1e6 + (r.nodes > 1 ? hw.inter_latency_us : hw.intra_latency_us);
    };
    return {one(act), one(out)};
  }
  // Hierarchical AllGather (tokens) + ReduceScatter (outputs): across scale-up domains between
  // same-index ranks, and inside the domain; the two phases are pipelined in chunks, so the
  // slower one sets the time. Independent of routing skew.
  auto one = [&](double bytes_per_token) {
    const double inter = r.nodes > 1 ? (r.nodes - 1) * t_dev * bytes_per_token / inter_bw * 1e6 : 0.0;
    const double intra = (r.local - 1) * r.nodes * t_dev * bytes_per_token / intra_bw * 1e6;
    return std::max(inter, intra) + hw.intra_latency_us + (r.nodes > 1 ? hw.inter_latency_us : 0.0);
  };
  return {one(act), one(out)};
}

void Finish(LayerTime* t, const LayerTime& half, bool overlap, double overlap_eff, double overhead_us) {
  // `half` holds module times of one micro-batch; with overlap two run back to back.
  if (overlap) {
    LayerTime two = half;
    for (double* f : {&two.mla_proj, &two.mla_core, &two.attn_comm, &two.moe_gemm, &two.shared, &two.dense,
                      &two.dispatch, &two.combine, &two.dense_comm, &two.elementwise})
      *f *= 2;
    const double c = two.compute(), m = two.comm();
    two.total = std::max(c, m) + (1.0 - overlap_eff) * std::min(c, m) + overhead_us;
    two.overhead = overhead_us;
    *t = two;
  } else {
    *t = half;
    t->overhead = overhead_us;
    t->total = half.compute() + half.comm() + overhead_us;
  }
}

double ResidualImbalance(const InstanceLayout& l) {
  if (l.expert_imbalance > 0) return l.expert_imbalance;
  if (l.ep() <= 1) return 1.0;
  return l.redundant_experts > 0 ? kResidualImbalanceEplb : kResidualImbalanceNoEplb;
}

double ExpertImbalance(const Resolved& r, double rows_per_rank) {
  if (r.l.ep() <= 1) return 1.0;
  return ResidualImbalance(r.l) * (1.0 + ExpectedMaxNormal(r.l.ep()) / std::sqrt(std::max(rows_per_rank, 1.0)));
}

MemoryBreakdown Memory(const Resolved& r, double kv_tokens_needed) {
  const auto& s = r.ctx.shapes;
  const auto& c = r.ctx.config;
  const WType w = r.dep.weight_dtype;
  const int p = r.l.pp, a = r.l.attention_tp;
  const double layers = std::ceil(static_cast<double>(s.n_layers) / p);
  const double moe_layers = std::ceil(static_cast<double>(s.n_moe_layers) / p);
  const double dense_layers = std::ceil(static_cast<double>(s.n_dense_layers) / p);
  MemoryBreakdown m;
  m.attention = layers * s.attention.bytes(w) / a;
  m.dense_ffn = dense_layers * s.dense_ffn.bytes(w) / r.dense_tp;
  m.experts_per_device = r.experts_per_rank;
  m.routed_experts = moe_layers * r.experts_per_rank * s.routed_expert.bytes(w);
  m.shared_experts = r.l.shared_expert_devices > 0 ? 0 : moe_layers * s.shared_experts.bytes(w);
  m.router_norms = moe_layers * s.router.bytes(w) + s.final_norm.bytes(w);
  m.embedding = static_cast<double>(s.embedding.bytes(WType::kBF16)) / r.head_tp;
  m.lm_head = static_cast<double>(s.lm_head.bytes(WType::kBF16)) / r.head_tp;
  int kv_layers = static_cast<int>(layers);
  if (r.dep.mtp_layers > 0 && s.n_mtp_layers > 0) {
    m.mtp = s.n_mtp_layers * (s.attention.bytes(w) / a + r.experts_per_rank * s.routed_expert.bytes(w) +
                              (r.l.shared_expert_devices > 0 ? 0 : s.shared_experts.bytes(w)) +
                              s.router.bytes(w) + s.mtp_extra.bytes(w));
    kv_layers += s.n_mtp_layers;
  }
  m.reserved = r.ctx.hw.reserved_gb * 1e9;
  m.hbm = r.ctx.hw.hbm_gb * 1e9;
  m.kv_free = m.hbm - m.weights() - m.reserved;
  m.kv_bytes_per_token = static_cast<double>(LatentCacheBytesPerToken(c, r.dep.kv_dtype, kv_layers));
  m.kv_capacity_tokens = std::max(0.0, m.kv_free) / m.kv_bytes_per_token;
  m.kv_needed_tokens = kv_tokens_needed;
  return m;
}

std::string Bottleneck(const LayerTime& t) {
  std::vector<std::pair<double, const char*>> parts = {
      {t.mla_proj, "MLA projections"}, {t.mla_core, "MLA attention core"}, {t.moe_gemm, "routed-expert GEMMs"},
      {t.shared, "shared expert"}, {t.dispatch, "dispatch/AllGather"}, {t.combine, "combine/ReduceScatter"},
      {t.attn_comm, "attention TP communication"}, {t.elementwise, "element-wise ops"},
      {t.overhead, "per-layer overhead"}};
  std::sort(parts.begin(), parts.end(), [](auto& x, auto& y) { return x.first > y.first; });
  const double sum = t.compute() + t.comm() + t.overhead;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s (%.0f%% of a MoE layer's work), then %s (%.0f%%)", parts[0].second,
                100.0 * parts[0].first / std::max(sum, 1e-9), parts[1].second,
                100.0 * parts[1].first / std::max(sum, 1e-9));
  return buf;
}

}  // namespace

double ElementwiseBytesPerToken(const ModelConfig& c, bool prefill) {
  const double h = c.hidden_size, H = c.num_attention_heads;
  double elems = 12 * h + 2 * H * c.qk_head_dim() + 2 * H * c.v_head_dim +
                 (c.num_experts_per_tok + c.n_shared_experts) * 3.0 * c.moe_intermediate_size + c.num_experts_per_tok * h;
  if (prefill) elems += 2 * H * (c.qk_nope_head_dim + c.v_head_dim);
  return 2.0 * elems;
}

double ExpectedMaxNormal(int n) {
  if (n <= 1) return 0.0;
  return NormalQuantile((n - 0.375) / (n + 0.25));
}

PlanContext MakeContext(const ModelConfig& c, const HardwareProfile& hw, const Workload& w, const Slo& s) {
  return PlanContext{c, CountModuleShapes(c), hw, w, s};
}

// The FFN sublayer of one micro-batch, for decode and prefill alike. A MoE layer costs the
// routed experts' grouped GEMM (expert imbalance, weights of this rank's experts, or only the
// expected touched fraction when `only_touched_experts`), the shared experts (on dedicated
// devices, or on every device) and dispatch/combine. A dense layer costs its FFN under dense
// TP and the all-reduce. G: tokens of all DP groups; t_dev: tokens each device dispatches.
void FfnTime(const Resolved& r, bool moe, double G, double t_dev, bool only_touched_experts, LayerTime* t,
             double* imb_out) {
  const auto& hw = r.ctx.hw;
  const auto& c = r.ctx.config;
  const auto& s = r.ctx.shapes;
  const WType w = r.dep.weight_dtype;
  const double peak_w = hw.PeakTflops(w), mfu = hw.eff.gemm_mfu;
  if (!moe) {
    const int dtp = r.dense_tp;
    t->dense = RooflineUs(hw, 2.0 * t_dev * static_cast<double>(s.dense_ffn.linear_params()),
                          s.dense_ffn.bytes(w) / static_cast<double>(dtp), peak_w, mfu);
    if (dtp > 1)
      t->dense_comm = 2.0 * ((dtp - 1) * t_dev * 2.0 * c.hidden_size / (hw.intra_bw_gbs * 1e9 * hw.eff.comm) * 1e6 +
                             hw.intra_latency_us);
    return;
  }
  // Ranks that hold routed experts (an EP wider than the expert slots leaves ranks without any).
  const int E = std::max(1, std::min(r.l.ep(), s.n_routed + r.l.redundant_experts));
  const double rows_mean = G * s.topk / E;
  const double imb = ExpertImbalance(r, rows_mean);
  if (imb_out) *imb_out = imb;
  const double m = r.experts_per_rank;
  const double touched = only_touched_experts ? 1.0 - std::exp(-rows_mean / m) : 1.0;
  const double shared_lin = static_cast<double>(s.shared_experts.linear_params());
  double moe_us = RooflineUs(hw, 2.0 * rows_mean * imb * static_cast<double>(s.routed_expert.linear_params()) +
                                     2.0 * t_dev * s.n_routed * c.hidden_size,
                             m * touched * s.routed_expert.bytes(w), peak_w, mfu);
  if (r.l.shared_expert_devices > 0) {
    const double rows_sh = G / r.l.shared_expert_devices;
    moe_us = std::max(moe_us, RooflineUs(hw, 2.0 * rows_sh * shared_lin, s.shared_experts.bytes(w), peak_w, mfu));
  } else {
    t->shared = RooflineUs(hw, 2.0 * t_dev * shared_lin, s.shared_experts.bytes(w), peak_w, mfu);
  }
  t->moe_gemm = moe_us;
  auto [dsp, cmb] = MoeCommUs(r, t_dev, imb);
  t->dispatch = dsp;
  t->combine = cmb;
}

RoleResult EvaluateDecode(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout) {
  const Resolved r = Resolve(ctx, dep, layout);
  const auto& c = ctx.config;
  const auto& s = ctx.shapes;
  const auto& hw = ctx.hw;
  const auto& wl = ctx.workload;
  const WType w = dep.weight_dtype;
  const double peak_w = hw.PeakTflops(w), peak_bf16 = hw.tflops_bf16;
  const double mfu = hw.eff.gemm_mfu;
  const int a = layout.attention_tp, dp = layout.dp();

  RoleResult res;
  res.role = Role::kDecode;
  res.layout = r.l;
  res.batch = layout.batch;
  const double B = layout.batch;             // requests per device
  const double Bg = B * a;                   // requests per attention DP group
  const double q = 1.0 + dep.mtp_layers;     // query tokens per request per step
  double acc = 1.0, pa = 1.0;
  for (int i = 0; i < dep.mtp_layers; ++i) { pa *= dep.mtp_acceptance; acc += pa; }
  res.accepted_tokens_per_step = acc;
  const double ctx_avg = wl.input_len + 0.5 * wl.output_len;
  const double kv_layer_bytes = static_cast<double>(LatentCacheBytesPerToken(c, dep.kv_dtype, 1));

  // DP-attention straggler from the spread of per-rank context sums.
  const double var = std::pow(wl.input_len_cv * wl.input_len, 2) + std::pow(wl.output_len_cv * 0.5 * wl.output_len, 2) +
                     std::pow(static_cast<double>(wl.output_len), 2) / 12.0;
  const double cv_ctx = std::sqrt(var) / ctx_avg;
  res.straggler = 1.0 + ExpectedMaxNormal(dp * layout.pp) * cv_ctx / std::sqrt(std::max(Bg, 1.0));

  const double attn_lin = static_cast<double>(s.attention.linear_params());

  // One micro-batch holding fraction f of the batch.
  auto layer = [&](double f, bool moe, double* imb_out) {
    LayerTime t;
    const double tg = Bg * q * f;  // tokens per attention group
    const double t_dev = tg / a;   // tokens each device dispatches
    t.mla_proj = RooflineUs(hw, 2.0 * tg * attn_lin / a, s.attention.bytes(w) / static_cast<double>(a), peak_w, mfu);
    const double core_flops = 2.0 * c.num_attention_heads * q * ctx_avg * (c.latent_dim() + c.kv_lora_rank) * Bg * f / a;
    const double core_bytes = Bg * f * ctx_avg * kv_layer_bytes;
    t.mla_core = RooflineUs(hw, core_flops, core_bytes, peak_bf16, mfu * hw.eff.mla_attention) * res.straggler;
    t.elementwise = t_dev * ElementwiseBytesPerToken(c, false) / (hw.hbm_bw_gbs * 1e9 * hw.eff.bandwidth) * 1e6;
    FfnTime(r, moe, dp * tg, t_dev, /*only_touched_experts=*/true, &t, imb_out);
    return t;
  };
  const bool mbo = layout.micro_batch_overlap;
  const double f = mbo ? 0.5 : 1.0;
  double imb = 1.0;
  Finish(&res.moe_layer, layer(f, true, &imb), mbo, hw.eff.overlap, hw.eff.layer_overhead_us);
  Finish(&res.dense_layer, layer(f, false, nullptr), mbo, hw.eff.overlap, hw.eff.layer_overhead_us);
  layer(1.0, true, &imb);  // report the full-batch imbalance
  res.expert_imbalance = imb;

  // LM head (vocab-parallel inside the node), logits for every query position.
  const double t_dev_full = B * q;
  const int htp = r.head_tp;
  const double head_params = static_cast<double>(s.lm_head.params());
  double head_us = RooflineUs(hw, 2.0 * t_dev_full * head_params, s.lm_head.bytes(WType::kBF16) / static_cast<double>(htp), peak_bf16, mfu);
  if (htp > 1) head_us += (htp - 1) * t_dev_full * 2.0 * c.hidden_size / (hw.intra_bw_gbs * 1e9 * hw.eff.comm) * 1e6 + hw.intra_latency_us;
  res.lm_head_ms = head_us / 1000;
  // MTP drafts: each draft token runs the MTP block (one MoE layer) and the shared head.
  res.mtp_ms = dep.mtp_layers * (res.moe_layer.total + head_us) / 1000;
  res.n_moe_layers = s.n_moe_layers;
  res.n_dense_layers = s.n_dense_layers;
  res.overhead_ms = hw.eff.step_overhead_us / 1000 + (layout.pp - 1) * hw.inter_latency_us / 1000;
  res.step_ms = (s.n_moe_layers * res.moe_layer.total + s.n_dense_layers * res.dense_layer.total) / 1000 +
                res.mtp_ms + res.lm_head_ms + res.overhead_ms;
  res.tpot_ms = res.step_ms / acc;
  res.tok_s_per_user = 1000.0 / res.tpot_ms;
  res.per_device_tok_s = B * acc / (res.step_ms / 1000);
  res.concurrency_per_device = B;
  res.memory = Memory(r, Bg * (wl.input_len + wl.output_len));
  res.bottleneck = Bottleneck(res.moe_layer);
  res.feasible = true;
  if (res.memory.kv_free <= 0) {
    res.feasible = false;
    res.why_infeasible = "weights do not fit in HBM";
  } else if (res.memory.kv_needed_tokens > res.memory.kv_capacity_tokens) {
    res.feasible = false;
    res.why_infeasible = "latent cache for the batch exceeds KV capacity";
  } else if (ctx.slo.tpot_ms > 0 && res.tpot_ms > ctx.slo.tpot_ms) {
    res.feasible = false;
    res.why_infeasible = "TPOT above the SLO";
  }
  return res;
}

RoleResult EvaluatePrefill(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout) {
  const Resolved r = Resolve(ctx, dep, layout);
  const auto& c = ctx.config;
  const auto& s = ctx.shapes;
  const auto& hw = ctx.hw;
  const auto& wl = ctx.workload;
  const WType w = dep.weight_dtype;
  const double peak_w = hw.PeakTflops(w), peak_bf16 = hw.tflops_bf16;
  const double mfu = hw.eff.gemm_mfu;
  const int a = layout.attention_tp, dp = layout.dp();

  RoleResult res;
  res.role = Role::kPrefill;
  res.layout = r.l;
  res.batch = layout.batch;
  const double N = layout.batch;
  const double pg = std::ceil(N / dp);  // prompts per attention group (idle groups if N < dp)
  const double L = wl.input_len, hit = wl.prefix_hit_rate, Lnew = L * (1.0 - hit);
  const double tg = pg * Lnew, t_dev = tg / a;
  // Pipeline parallelism: the batch is cut into `chunks` sequence chunks that flow through the
  // pp stages (chunked prefill), so a stage works on chunk i while the next works on i-1.
  const int pp = layout.pp;
  const double chunks = pp > 1 ? 2.0 * pp : 1.0;
  res.chunks = static_cast<int>(chunks);
  const double attn_lin = static_cast<double>(s.attention.linear_params());
  const double kvb_lin = static_cast<double>(c.kv_lora_rank) * c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim);
  double imb_full = 1.0;

  auto layer = [&](double f, bool moe, double* imb_out) {
    LayerTime t;
    const double tgf = tg * f / chunks, tdf = t_dev * f / chunks;  // tokens of one chunk (micro-batch)
    // Cached K/V of earlier tokens of the same prompts that a chunk decompresses (kv_b): the
    // prefix-cache hits plus, on average, half of the earlier chunks.
    const double prior = L * hit + Lnew * (chunks - 1) / (2 * chunks);
    // Naive (decompressed) MLA: projections for new tokens + kv_b decompression of the cached prefix.
    t.mla_proj = RooflineUs(hw, (2.0 * tgf * attn_lin + 2.0 * pg * f * prior * kvb_lin) / a,
                            s.attention.bytes(w) / static_cast<double>(a), peak_w, mfu);
    const double causal_pairs = 0.5 * (L * L - (L * hit) * (L * hit));
    const double core_flops = 2.0 * c.num_attention_heads * (c.qk_head_dim() + c.v_head_dim) * pg * f * causal_pairs / chunks / a;
    t.mla_core = RooflineUs(hw, core_flops, 0, peak_bf16, mfu * hw.eff.mla_attention);
    t.elementwise = tdf * ElementwiseBytesPerToken(c, true) / (hw.hbm_bw_gbs * 1e9 * hw.eff.bandwidth) * 1e6;
    if (a > 1) {
      const double bw = (a <= r.local ? hw.intra_bw_gbs : hw.inter_bw_gbs) * 1e9 * hw.eff.comm;
      t.attn_comm = 2.0 * (a - 1.0) / a * tgf * 2.0 * c.hidden_size / bw * 1e6 +
                    2 * (a <= r.local ? hw.intra_latency_us : hw.inter_latency_us);
    }
    FfnTime(r, moe, dp * tgf, tdf, /*only_touched_experts=*/false, &t, imb_out);
    return t;
  };
  const bool mbo = layout.micro_batch_overlap;
  const double f = mbo ? 0.5 : 1.0;
  Finish(&res.moe_layer, layer(f, true, nullptr), mbo, hw.eff.overlap, hw.eff.layer_overhead_us);
  Finish(&res.dense_layer, layer(f, false, nullptr), mbo, hw.eff.overlap, hw.eff.layer_overhead_us);
  layer(1.0, true, &imb_full);
  res.expert_imbalance = imb_full;
  // LM head for the last position of each prompt only.
  const double head_rows = pg / a * r.head_tp;
  res.lm_head_ms = RooflineUs(hw, 2.0 * head_rows * s.lm_head.params() / r.head_tp,
                              s.lm_head.bytes(WType::kBF16) / static_cast<double>(r.head_tp), peak_bf16, mfu) / 1000;
  res.n_moe_layers = s.n_moe_layers;
  res.n_dense_layers = s.n_dense_layers;
  res.overhead_ms = hw.eff.step_overhead_us / 1000 + (layout.pp - 1) * hw.inter_latency_us / 1000;
  // One chunk through all layers (all stages), ms.
  const double chunk_ms = (s.n_moe_layers * res.moe_layer.total + s.n_dense_layers * res.dense_layer.total) / 1000;
  // Every stage holds 1/pp of the layers: the batch occupies each stage chunks x chunk_ms / pp;
  // the first token waits for (chunks + pp - 1) stage slots.
  res.step_ms = chunks * chunk_ms / pp + res.lm_head_ms + res.overhead_ms;
  const double first_token_ms = (chunks + pp - 1) * chunk_ms / pp + res.lm_head_ms + res.overhead_ms;
  // Latent cache of the batch to the decode instance over the scale-out NICs (each TP rank of
  // a group sends 1/a of it).
  const double kv_token = static_cast<double>(LatentCacheBytesPerToken(c, dep.kv_dtype, s.n_layers));
  res.kv_transfer_ms = pg * L * kv_token / a / (hw.inter_bw_gbs * 1e9 * hw.eff.comm) * 1000;
  res.ttft_ms = first_token_ms + res.kv_transfer_ms;
  // Steady state: a new batch enters every step_ms; the instance has `devices` devices.
  res.per_device_tok_s = N * L / (res.step_ms / 1000) / layout.devices;
  res.concurrency_per_device = N * layout.pp / layout.devices;
  res.memory = Memory(r, pg * L);
  res.bottleneck = Bottleneck(res.moe_layer);
  res.feasible = true;
  if (res.memory.kv_free <= 0) {
    res.feasible = false;
    res.why_infeasible = "weights do not fit in HBM";
  } else if (res.memory.kv_needed_tokens > res.memory.kv_capacity_tokens) {
    res.feasible = false;
    res.why_infeasible = "latent cache for the batch exceeds KV capacity";
  } else if (t_dev > kMaxPrefillTokensPerDevice) {
    res.feasible = false;
    res.why_infeasible = "more than 32K prompt tokens per device in one forward";
  } else if (ctx.slo.ttft_ms > 0 && res.ttft_ms > ctx.slo.ttft_ms) {
    res.feasible = false;
    res.why_infeasible = "TTFT above the SLO";
  }
  return res;
}

double TheoreticalDecodeTokS(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout,
                             double tpot_ms, double* batch_out) {
  const Resolved r = Resolve(ctx, dep, layout);
  const auto& c = ctx.config;
  const auto& s = ctx.shapes;
  const auto& hw = ctx.hw;
  const WType w = dep.weight_dtype;
  const double q = 1.0 + dep.mtp_layers;
  double acc = 1.0, pa = 1.0;
  for (int i = 0; i < dep.mtp_layers; ++i) { pa *= dep.mtp_acceptance; acc += pa; }
  const double ctx_avg = ctx.workload.input_len + 0.5 * ctx.workload.output_len;
  // MLA time per request per layer, seconds (the formula of SYSTEM.md sec. 3).
  const double t_req = q * ctx_avg * (c.latent_dim() + c.kv_lora_rank) * c.num_attention_heads * 2.0 /
                       (hw.tflops_bf16 * 1e12 * hw.eff.gemm_mfu * hw.eff.mla_attention);
  const double bw = hw.hbm_bw_gbs * 1e9 * hw.eff.bandwidth;
  const double attn_w = s.attention.bytes(w) / static_cast<double>(layout.attention_tp);
  const double moe_w = attn_w + r.experts_per_rank * s.routed_expert.bytes(w) +
                       (layout.shared_expert_devices > 0 ? 0.0 : s.shared_experts.bytes(w));
  const double dense_w = attn_w + s.dense_ffn.bytes(w) / static_cast<double>(r.dense_tp);
  const int mtp = dep.mtp_layers > 0 ? s.n_mtp_layers : 0;
  const double weights_s = ((s.n_moe_layers + mtp) * moe_w + s.n_dense_layers * dense_w) / bw;
  const double layers = s.n_layers + mtp;
  const double step_s = tpot_ms / 1000.0 * acc;
  const double B = std::max(0.0, (step_s - weights_s) / (layers * t_req));
  if (batch_out) *batch_out = B;
  return B / (tpot_ms / 1000.0);
}

RoleResult EvaluateRole(const PlanContext& ctx, const Deployment& dep, const InstanceLayout& layout) {
  auto eval = [&](double b) {
    InstanceLayout l = layout;
    l.batch = b;
    return l.role == Role::kDecode ? EvaluateDecode(ctx, dep, l) : EvaluatePrefill(ctx, dep, l);
  };
  if (layout.batch > 0) return eval(layout.batch);
  // Decode: batch in requests per device, stepping by 1/attention_tp (whole requests per group).
  // Prefill: whole prompts per instance batch.
  const double step = layout.role == Role::kDecode ? 1.0 / layout.attention_tp : 1.0;
  const double max_units = layout.role == Role::kDecode ? kMaxDecodeRequestsPerDevice * layout.attention_tp
                                                        : kMaxPrefillTokensPerDevice * layout.devices / std::max(1, ctx.workload.input_len) + layout.dp();
  RoleResult first = eval(step);
  if (!first.feasible) return first;
  // Feasibility is monotone in the batch (memory and latency grow with it): binary search.
  int64_t lo = 1, hi = static_cast<int64_t>(std::max(1.0, max_units));
  if (eval(hi * step).feasible) return eval(hi * step);
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (eval(mid * step).feasible ? lo : hi) = mid;
  }
  RoleResult best = eval(lo * step);
  if (layout.role == Role::kPrefill) {
    // Prefill throughput is not monotone in the batch (idle DP groups when N % dp != 0):
    // take the best multiple of dp not above lo, if better.
    const int64_t dpn = layout.dp();
    if (lo >= dpn) {
      RoleResult alt = eval(static_cast<double>(lo / dpn * dpn));
      if (alt.feasible && alt.per_device_tok_s > best.per_device_tok_s) best = alt;
    }
  }
  return best;
}

json MemoryToJson(const MemoryBreakdown& m) {
  auto gb = [](double b) { return std::round(b / 1e7) / 100.0; };
  return json{{"attention_gb", gb(m.attention)},
              {"dense_ffn_gb", gb(m.dense_ffn)},
              {"routed_experts_gb", gb(m.routed_experts)},
              {"experts_per_device", m.experts_per_device},
              {"shared_experts_gb", gb(m.shared_experts)},
              {"router_norms_gb", gb(m.router_norms)},
              {"embedding_gb", gb(m.embedding)},
              {"lm_head_gb", gb(m.lm_head)},
              {"mtp_gb", gb(m.mtp)},
              {"weights_gb", gb(m.weights())},
              {"reserved_gb", gb(m.reserved)},
              {"hbm_gb", gb(m.hbm)},
              {"kv_free_gb", gb(m.kv_free)},
              {"kv_bytes_per_token", m.kv_bytes_per_token},
              {"kv_capacity_tokens", std::floor(m.kv_capacity_tokens)},
              {"kv_needed_tokens", m.kv_needed_tokens}};
}

json LayerTimeToJson(const LayerTime& t) {
  auto r = [](double us) { return std::round(us * 10) / 10.0; };
  return json{{"mla_proj_us", r(t.mla_proj)},   {"mla_core_us", r(t.mla_core)}, {"attn_comm_us", r(t.attn_comm)},
              {"moe_gemm_us", r(t.moe_gemm)},   {"shared_us", r(t.shared)},     {"dense_us", r(t.dense)},
              {"dispatch_us", r(t.dispatch)},   {"combine_us", r(t.combine)},   {"dense_comm_us", r(t.dense_comm)},
              {"elementwise_us", r(t.elementwise)}, {"overhead_us", r(t.overhead)},   {"total_us", r(t.total)}};
}

json RoleResultToJson(const RoleResult& r) {
  auto r2 = [](double v) { return std::round(v * 100) / 100.0; };
  json j{{"role", RoleName(r.role)},
         {"feasible", r.feasible},
         {"per_device_tok_s", r2(r.per_device_tok_s)},
         // Not applicable to the role: null (decode has no TTFT of its own, prefill no TPOT).
         {"tpot_ms", r.role == Role::kDecode ? json(r2(r.tpot_ms)) : json(nullptr)},
         {"ttft_ms", r.role == Role::kPrefill ? json(r2(r.ttft_ms)) : json(nullptr)},
         {"concurrency_per_device", r2(r.concurrency_per_device)},
         {"step_ms", r2(r.step_ms)},
         {"layout", LayoutToJson(r.layout)},
         {"layout_summary", r.layout.Summary()},
         {"memory", MemoryToJson(r.memory)},
         {"moe_layer", LayerTimeToJson(r.moe_layer)},
         {"dense_layer", LayerTimeToJson(r.dense_layer)},
         {"n_moe_layers", r.n_moe_layers},
         {"n_dense_layers", r.n_dense_layers},
         {"mtp_ms", r2(r.mtp_ms)},
         {"lm_head_ms", r2(r.lm_head_ms)},
         {"overhead_ms", r2(r.overhead_ms)},
         {"straggler", r2(r.straggler)},
         {"expert_imbalance", r2(r.expert_imbalance)},
         {"bottleneck", r.bottleneck}};
  if (r.role == Role::kDecode) {
    j["tok_s_per_user"] = r2(r.tok_s_per_user);
    j["accepted_tokens_per_step"] = r2(r.accepted_tokens_per_step);
  } else {
    j["batch_prompts"] = r.batch;
    j["kv_transfer_ms"] = r2(r.kv_transfer_ms);
  }
  if (!r.feasible) j["why_infeasible"] = r.why_infeasible;
  return j;
}

}  // namespace ds::planner
