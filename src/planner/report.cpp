#include "planner/report.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <map>

namespace ds::planner {
namespace {

std::string Fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

double Gb(double b) { return b / 1e9; }

// "2 devices" < "16 devices" < "128 devices": digit runs compare as numbers.
struct NaturalLess {
  bool operator()(const std::string& a, const std::string& b) const {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
        size_t i2 = i, j2 = j;
        while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
        while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
        const long x = std::stol(a.substr(i, i2 - i)), y = std::stol(b.substr(j, j2 - j));
        if (x != y) return x < y;
        i = i2;
        j = j2;
      } else {
        if (a[i] != b[j]) return a[i] < b[j];
        ++i;
        ++j;
      }
    }
    return a.size() - i < b.size() - j;
  }
};

}  // namespace

std::string FormatRoleTable(const std::vector<RoleResult>& rows, Role role) {
  std::string out;
  if (role == Role::kDecode) {
    out += Fmt("  %-62s %9s %8s %8s %9s %10s %9s\n", "decode layout", "req/dev", "TPOT ms", "tok/s/u", "step ms",
               "tok/s/dev", "KV use");
  } else {
    out += Fmt("  %-62s %9s %8s %9s %10s %9s\n", "prefill layout", "prompts", "TTFT ms", "batch ms", "tok/s/dev",
               "KV use");
  }
  for (const auto& r : rows) {
    const double kv = r.memory.kv_capacity_tokens > 0 ? r.memory.kv_needed_tokens / r.memory.kv_capacity_tokens : 0;
    if (role == Role::kDecode)
      out += Fmt("  %-62s %9.1f %8.1f %8.1f %9.1f %10.0f %8.0f%%%s\n", r.layout.Summary().c_str(), r.batch, r.tpot_ms,
                 r.tok_s_per_user, r.step_ms, r.per_device_tok_s, 100 * kv,
                 r.feasible ? "" : ("  [" + r.why_infeasible + "]").c_str());
    else
      out += Fmt("  %-62s %9.0f %8.1f %9.1f %10.0f %8.0f%%%s\n", r.layout.Summary().c_str(), r.batch, r.ttft_ms,
                 r.step_ms, r.per_device_tok_s, 100 * kv, r.feasible ? "" : ("  [" + r.why_infeasible + "]").c_str());
  }
  return out;
}

std::string ExplainRole(const PlanContext& ctx, const Deployment& dep, const RoleResult& r) {
  std::string o;
  const auto& m = r.memory;
  o += Fmt("%s instance: %s\n", r.role == Role::kDecode ? "Decode" : "Prefill", r.layout.Summary().c_str());
  o += Fmt("  weights %s, latent cache %s, MTP %d draft token(s) at %.0f%% acceptance\n", WTypeName(dep.weight_dtype),
           WTypeName(dep.kv_dtype), dep.mtp_layers, 100 * dep.mtp_acceptance);
  o += "  Memory per device (GB):\n";
  o += Fmt("    attention %.2f | dense FFN %.2f | routed experts %.2f (%.0f per layer) | shared experts %.2f\n",
           Gb(m.attention), Gb(m.dense_ffn), Gb(m.routed_experts), m.experts_per_device, Gb(m.shared_experts));
  o += Fmt("    router+norms %.2f | embedding %.2f | LM head %.2f | MTP %.2f | = weights %.2f\n", Gb(m.router_norms),
           Gb(m.embedding), Gb(m.lm_head), Gb(m.mtp), Gb(m.weights()));
  o += Fmt("    reserved %.1f | HBM %.1f | left for latent cache %.2f = %.0f tokens at %.0f B/token; batch needs %.0f (%.0f%%)\n",
           Gb(m.reserved), Gb(m.hbm), Gb(m.kv_free), m.kv_capacity_tokens, m.kv_bytes_per_token, m.kv_needed_tokens,
           m.kv_capacity_tokens > 0 ? 100 * m.kv_needed_tokens / m.kv_capacity_tokens : 0.0);
  auto row = [&](const char* name, const LayerTime& t, int n) {
    std::string s = Fmt("    %-9s x%-3d MLA proj %7.1f | MLA core %7.1f | ", name, n, t.mla_proj, t.mla_core);
    if (t.dense > 0) s += Fmt("dense FFN %7.1f | dense comm %6.1f | ", t.dense, t.dense_comm);
    else s += Fmt("experts %7.1f | shared %6.1f | ", t.moe_gemm, t.shared);
    s += Fmt("%s %7.1f | %s %7.1f | ", r.layout.moe_comm == MoeComm::kAllToAll ? "dispatch" : "AllGather",
             t.dispatch, r.layout.moe_comm == MoeComm::kAllToAll ? "combine" : "ReduceScatter", t.combine);
    if (t.attn_comm > 0) s += Fmt("attn TP comm %6.1f | ", t.attn_comm);
    s += Fmt("elementwise %6.1f | overhead %5.1f => %8.1f us\n", t.elementwise, t.overhead, t.total);
    return s;
  };
  o += Fmt("  Per-layer time per device (us; %s):\n",
           r.layout.micro_batch_overlap
               ? "two micro-batches, layer = max(compute, comm) + (1 - overlap) x min + overhead"
               : "no overlap, layer = compute + comm + overhead");
  o += row("MoE layer", r.moe_layer, r.n_moe_layers);
  o += row("dense", r.dense_layer, r.n_dense_layers);
  const double moe_ms = r.n_moe_layers * r.moe_layer.total / 1000, dense_ms = r.n_dense_layers * r.dense_layer.total / 1000;
  if (r.role == Role::kDecode) {
    o += Fmt("  Step %.1f ms = MoE layers %.1f + dense layers %.1f + MTP draft %.1f + LM head %.1f + step overhead %.1f\n",
             r.step_ms, moe_ms, dense_ms, r.mtp_ms, r.lm_head_ms, r.overhead_ms);
    o += Fmt("  %.1f requests per device x %.2f accepted tokens per step / %.1f ms = %.0f tok/s per device; TPOT %.1f ms "
             "(%.1f tok/s per user)\n",
             r.concurrency_per_device, r.accepted_tokens_per_step, r.step_ms, r.per_device_tok_s, r.tpot_ms,
             r.tok_s_per_user);
    o += Fmt("  DP-attention straggler x%.3f (z(%d ranks) x context spread), expert load max/mean x%.3f\n", r.straggler,
             r.layout.dp() * r.layout.pp, r.expert_imbalance);
  } else {
    if (r.chunks > 1)
      o += Fmt("  PP%d, batch cut into %d chunks: one chunk through all layers %.1f ms (MoE layers %.1f + dense %.1f); "
               "a batch occupies each stage %.1f ms; first token after %d stage slots\n",
               r.layout.pp, r.chunks, moe_ms + dense_ms, moe_ms, dense_ms, r.step_ms, r.chunks + r.layout.pp - 1);
    else
      o += Fmt("  Batch %.1f ms = MoE layers %.1f + dense layers %.1f + LM head %.1f + overhead %.1f\n", r.step_ms,
               moe_ms, dense_ms, r.lm_head_ms, r.overhead_ms);
    o += Fmt("  KV transfer %.1f ms; TTFT %.1f ms\n", r.kv_transfer_ms, r.ttft_ms);
    o += Fmt("  %.0f prompts x %d tokens every %.1f ms / %d devices = %.0f input tok/s per device; expert load "
             "max/mean x%.3f\n",
             r.batch, ctx.workload.input_len, r.step_ms, r.layout.devices, r.per_device_tok_s, r.expert_imbalance);
  }
  o += "  Bottleneck: " + r.bottleneck + "\n";
  if (!r.feasible) o += "  NOT FEASIBLE: " + r.why_infeasible + "\n";
  return o;
}

std::string ExplainChoice(const std::vector<RoleResult>& all, const RoleResult& best) {
  struct Dim {
    const char* name;
    std::function<std::string(const InstanceLayout&)> key;
  };
  const std::vector<Dim> dims = {
      {"instance size", [](const InstanceLayout& l) { return std::to_string(l.devices) + " devices"; }},
      {"pipeline stages", [](const InstanceLayout& l) { return "PP" + std::to_string(l.pp); }},
      {"attention TP", [](const InstanceLayout& l) { return "TP" + std::to_string(l.attention_tp); }},
      {"MoE communication", [](const InstanceLayout& l) { return std::string(MoeCommName(l.moe_comm)); }},
      {"micro-batch overlap", [](const InstanceLayout& l) { return std::string(l.micro_batch_overlap ? "on" : "off"); }},
      {"redundant experts", [](const InstanceLayout& l) { return std::string(l.redundant_experts ? "yes" : "none"); }},
  };
  std::string o = Fmt("Why %s (best of %zu candidates): best alternative for each choice\n", best.layout.Summary().c_str(),
                      all.size());
  for (const auto& d : dims) {
    std::map<std::string, const RoleResult*, NaturalLess> by;
    std::map<std::string, std::string, NaturalLess> why_not;
    for (const auto& r : all) {
      const std::string k = d.key(r.layout);
      if (r.feasible) {
        if (!by[k] || r.per_device_tok_s > by[k]->per_device_tok_s) by[k] = &r;
      } else if (!why_not.count(k)) {
        why_not[k] = r.why_infeasible;
      }
    }
    o += Fmt("  %-20s", d.name);
    const std::string chosen = d.key(best.layout);
    std::string line;
    for (const auto& [k, w] : why_not)
      if (!by.count(k) || !by[k]) by[k] = nullptr;
    for (const auto& [k, r] : by) {
      if (r)
        line += Fmt(" %s%s: %.0f tok/s/dev (%.1f per dev);", k == chosen ? "*" : "", k.c_str(), r->per_device_tok_s,
                    r->concurrency_per_device);
      else
        line += Fmt(" %s: infeasible (%s);", k.c_str(), why_not[k].c_str());
    }
    o += line + "\n";
  }
  return o;
}

}  // namespace ds::planner
