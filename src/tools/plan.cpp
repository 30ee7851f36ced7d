// `dsinfer plan`: deployment planner. Without --deployment it searches prefill and decode
// layouts for the workload and SLO and prints the best; with --deployment FILE it evaluates
// that deployment. Model: src/planner/perf_model.h; formats: docs/design/planner.md.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "planner/deployment.h"
#include "planner/hardware.h"
#include "planner/perf_model.h"
#include "planner/report.h"
#include "planner/search.h"
#include "tools/command.h"

namespace {

using json = nlohmann::json;
using namespace ds::planner;

int Fail(const ds::Status& s) {
  std::fprintf(stderr, "dsinfer plan: %s\n", s.ToString().c_str());
  return s.code() == ds::StatusCode::kInvalidArgument ? 2 : 1;
}

int RunPlan(int argc, char** argv) {
  CLI::App app{"Plan a DeepSeek-V3-family deployment: predict TTFT, TPOT, throughput and memory; search layouts"};
  std::string model_dir, hardware, deployment_file, output = "table", plot_file, weight_dtype, kv_dtype = "bf16";
  Workload w;
  Slo slo;
  int devices = 0, top = 5, mtp_layers = 1;
  double mtp_acceptance = 0.7;
  bool explain = false;
  app.add_option("--model", model_dir, "model directory (config.json) or config file")->required();
  app.add_option("--hardware", hardware, "hardware profile name (data/hardware/NAME.json) or a JSON file path")->required();
  app.add_option("--input-len", w.input_len, "prompt tokens per request")->required()->check(CLI::Range(1, 10000000));
  app.add_option("--output-len", w.output_len, "output tokens per request")->required()->check(CLI::Range(1, 10000000));
  app.add_option("--tpot-ms", slo.tpot_ms, "TPOT SLO in ms (decode)")->check(CLI::Range(0.0, 1e7));
  app.add_option("--ttft-ms", slo.ttft_ms, "TTFT SLO in ms (prefill; search default 1000)")->check(CLI::Range(0.0, 1e7));
  app.add_option("--devices", devices, "devices available (search limit and P/D split)")->check(CLI::Range(0, 1000000));
  app.add_option("--deployment", deployment_file, "evaluate this deployment JSON instead of searching");
  app.add_option("--output", output, "table | json")->check(CLI::IsMember({"table", "json"}));
  app.add_flag("--explain", explain, "print the per-module breakdown and the reasons for the choice");
  app.add_option("--plot", plot_file, "write the decode frontier (tok/s per device vs tok/s per user) as SVG");
  app.add_option("--prefix-hit-rate", w.prefix_hit_rate, "fraction of input tokens hit in the prefix cache")->check(CLI::Range(0.0, 0.99));
  app.add_option("--concurrency", w.concurrency, "total concurrent requests (sizes the P/D split)")->check(CLI::Range(0.0, 1e9));
  app.add_option("--input-len-cv", w.input_len_cv, "coefficient of variation of input lengths")->check(CLI::Range(0.0, 10.0));
  app.add_option("--output-len-cv", w.output_len_cv, "coefficient of variation of output lengths")->check(CLI::Range(0.0, 10.0));
  app.add_option("--mtp-layers", mtp_layers, "MTP draft tokens per step in searched layouts (0 = off)")->check(CLI::Range(0, 4));
  app.add_option("--mtp-acceptance", mtp_acceptance, "MTP draft acceptance in searched layouts")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-dtype", weight_dtype, "bf16 | fp8 | int8 (default: the profile's)");
  app.add_option("--kv-dtype", kv_dtype, "latent cache dtype for searched layouts: bf16 | fp8");
  app.add_option("--top", top, "layouts shown per role")->check(CLI::Range(1, 100));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  auto cfg = ds::LoadModelConfig(model_dir);
  if (!cfg.ok()) return Fail(cfg.status());
  auto hw = LoadHardwareProfile(hardware);
  if (!hw.ok()) return Fail(hw.status());
  WType default_w = hw->default_weight_dtype;
  if (!weight_dtype.empty()) {
    auto wt = ParseWType(weight_dtype);
    if (!wt.ok()) return Fail(wt.status());
    default_w = *wt;
  }
  if (!hw->Supports(default_w))
    std::fprintf(stderr, "dsinfer plan: warning: %s has no %s tensor cores; GEMMs use its bf16 peak\n", hw->name.c_str(),
                 WTypeName(default_w));

  json out{{"model", cfg->model_type},
           {"hardware", hw->name},
           {"workload",
            {{"input_len", w.input_len}, {"output_len", w.output_len}, {"prefix_hit_rate", w.prefix_hit_rate},
             {"input_len_cv", w.input_len_cv}, {"output_len_cv", w.output_len_cv}, {"concurrency", w.concurrency}}},
           {"slo", {{"tpot_ms", slo.tpot_ms}, {"ttft_ms", slo.ttft_ms}}}};
  std::string text;
  std::vector<InstanceLayout> frontier_layouts;
  Deployment base;
  std::string header = "dsinfer plan: " + cfg->model_type + " on " + hw->name + ", " + std::to_string(w.input_len) +
                       " in + " + std::to_string(w.output_len) + " out";
  // %g: the SLO as given (47.6 printed as "47" by an int cast read as a tighter objective).
  auto ms = [](double v) { char b[32]; std::snprintf(b, sizeof b, "%g", v); return std::string(b); };
  if (slo.tpot_ms > 0) header += ", TPOT <= " + ms(slo.tpot_ms) + " ms";
  if (slo.ttft_ms > 0) header += ", TTFT <= " + ms(slo.ttft_ms) + " ms";
  text += header + "\n";

  if (!deployment_file.empty()) {
    auto dep = LoadDeployment(deployment_file, default_w);
    if (!dep.ok()) return Fail(dep.status());
    base = *dep;
    PlanContext ctx = MakeContext(*cfg, *hw, w, slo);
    out["deployment"] = DeploymentToJson(base);
    json roles = json::object();
    text += "Deployment " + (base.name.empty() ? deployment_file : base.name) + "\n";
    for (const auto* l : {base.prefill ? &*base.prefill : nullptr, base.decode ? &*base.decode : nullptr}) {
      if (!l) continue;
      RoleResult r = EvaluateRole(ctx, base, *l);
      roles[RoleName(l->role)] = RoleResultToJson(r);
      text += FormatRoleTable({r}, l->role);
      if (explain) text += ExplainRole(ctx, base, r);
      if (l->role == Role::kDecode && slo.tpot_ms > 0) {
        // The ideal bound of SYSTEM.md sec. 3 (attention formula + weight streaming only).
        double b = 0;
        const double ideal = TheoreticalDecodeTokS(ctx, base, *l, slo.tpot_ms, &b);
        roles["decode"]["theoretical_per_device_tok_s"] = std::round(ideal);
        roles["decode"]["theoretical_concurrency_per_device"] = std::round(b * 10) / 10;
        char buf[400];
        std::snprintf(buf, sizeof buf, "  theoretical bound at TPOT %.0f ms (MLA formula + weight streaming): %.0f tok/s per device at %.1f requests per device\n",
                      slo.tpot_ms, ideal, b);
        text += buf;
      }
      if (l->role == Role::kDecode) frontier_layouts.push_back(*l);
    }
    out["roles"] = roles;
  } else {
    base.weight_dtype = default_w;
    auto kv = ParseWType(kv_dtype);
    if (!kv.ok()) return Fail(kv.status());
    base.kv_dtype = *kv;
    base.mtp_layers = cfg->num_nextn_predict_layers > 0 ? mtp_layers : 0;
    base.mtp_acceptance = mtp_acceptance;
    Slo search_slo = slo;
    if (search_slo.ttft_ms <= 0) search_slo.ttft_ms = 1000;
    PlanContext ctx = MakeContext(*cfg, *hw, w, search_slo);
    SearchOptions opt;
    opt.max_devices = devices;
    opt.top = top;
    std::vector<RoleResult> all_dec, all_pre;
    auto dec = SearchRole(ctx, base, Role::kDecode, opt, &all_dec);
    auto pre = SearchRole(ctx, base, Role::kPrefill, opt, &all_pre);
    const std::string mtp = base.mtp_layers > 0 ? "MTP " + std::to_string(base.mtp_layers) + " draft @ " +
                                                     std::to_string(static_cast<int>(100 * base.mtp_acceptance)) + "% acceptance"
                                               : std::string("MTP off");
    text += "Searched layouts with weights " + std::string(WTypeName(base.weight_dtype)) + ", latent cache " +
            WTypeName(base.kv_dtype) + ", " + mtp +
            (slo.ttft_ms <= 0 ? " (prefill TTFT SLO defaulted to 1000 ms)" : "") + "\n";
    json roles = json::object();
    if (dec.empty()) {
      text += "decode: no layout meets the TPOT SLO within the device limit\n";
    } else {
      text += FormatRoleTable(dec, Role::kDecode);
      json arr = json::array();
      for (const auto& r : dec) arr.push_back(RoleResultToJson(r));
      roles["decode"] = arr[0];
      out["decode_candidates"] = arr;
      // The frontier spans every candidate decode layout (the SLO only picks a point on it).
      frontier_layouts = CandidateLayouts(ctx, Role::kDecode, devices);
    }
    if (pre.empty()) {
      text += "prefill: no layout meets the TTFT SLO within the device limit\n";
    } else {
      text += FormatRoleTable(pre, Role::kPrefill);
      json arr = json::array();
      for (const auto& r : pre) arr.push_back(RoleResultToJson(r));
      roles["prefill"] = arr[0];
      out["prefill_candidates"] = arr;
    }
    out["roles"] = roles;
    if (!dec.empty() && !pre.empty()) {
      PdSplit s = SplitPd(ctx, pre[0], dec[0], devices);
      if (s.devices > 0) {
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "Recommended P/D split: %d prefill instance(s) of %d + %d decode instance(s) of %d = %d devices, "
                      "%.1f requests/s, %.0f output tok/s per device overall\n",
                      s.prefill_instances, pre[0].layout.devices, s.decode_instances, dec[0].layout.devices, s.devices,
                      s.requests_per_s, s.output_tok_s_per_device);
        text += buf;
        out["pd_split"] = {{"prefill_instances", s.prefill_instances}, {"decode_instances", s.decode_instances},
                           {"devices", s.devices}, {"requests_per_s", s.requests_per_s},
                           {"output_tok_s_per_device", s.output_tok_s_per_device}};
      }
    }
    if (explain) {
      if (!dec.empty()) text += "\n" + ExplainRole(ctx, base, dec[0]) + ExplainChoice(all_dec, dec[0]);
      if (!pre.empty()) text += "\n" + ExplainRole(ctx, base, pre[0]) + ExplainChoice(all_pre, pre[0]);
    }
  }

  if (!plot_file.empty() && !frontier_layouts.empty()) {
    PlanContext ctx = MakeContext(*cfg, *hw, w, slo);
    auto [pts, front] = DecodeFrontier(ctx, base, frontier_layouts);
    std::ofstream f(plot_file);
    if (!f) return Fail(ds::NotFound("cannot write " + plot_file));
    f << FrontierSvg(pts, front, header, slo.tpot_ms > 0 ? 1000.0 / slo.tpot_ms : 0);
    json fj = json::array();
    for (const auto& p : front)
      fj.push_back({{"tok_s_per_user", p.tok_s_per_user}, {"per_device_tok_s", p.per_device_tok_s},
                    {"concurrency_per_device", p.batch}, {"layout", p.layout}});
    out["frontier"] = fj;
    text += "Frontier (" + std::to_string(front.size()) + " points) written to " + plot_file + "\n";
  }

  if (output == "json") std::cout << out.dump(2) << "\n";
  else std::cout << text;
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(plan, "plan a deployment: predict TTFT/TPOT/throughput/memory, search layouts for an SLO", RunPlan);
