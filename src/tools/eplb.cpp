// `dsinfer eplb`: the expert-parallel load balancer offline. Reads per-layer per-expert token
// counts (ExpertLoadSnapshot JSON / SGLang "logical_count"), computes a physical-to-logical
// expert map with redundant replicas (parallel/eplb.h) and prints, per layer, the balancedness
// (mean / max per-GPU load) before — under --current MAP, or the trivial placement slot s ->
// expert s mod E — and after. --output writes the map (parallel/expert_map.h JSON).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "parallel/eplb.h"
#include "parallel/expert_map.h"
#include "tools/command.h"

namespace {

int Fail(const ds::Status& s) {
  std::fprintf(stderr, "dsinfer eplb: %s\n", s.ToString().c_str());
  return s.code() == ds::StatusCode::kInvalidArgument ? 2 : 1;
}

int RunEplb(int argc, char** argv) {
  CLI::App app{"Rebalance MoE experts over GPUs from measured expert loads (EPLB)"};
  std::string load_file, output, current, policy_name = "auto";
  ds::EplbOptions o;
  app.add_option("--load", load_file, "expert load JSON: {\"logical_count\": [layers][experts]}")->required();
  app.add_option("--num-physical", o.num_physical, "physical expert slots per layer (>= experts, multiple of GPUs)")
      ->required();
  app.add_option("--num-gpus", o.num_gpus, "GPUs (EP size)")->required();
  app.add_option("--num-nodes", o.num_nodes, "nodes (divides --num-gpus)");
  app.add_option("--num-groups", o.num_groups, "expert groups (the config's n_group)");
  app.add_option("--policy", policy_name, "auto | hierarchical | global")
      ->check(CLI::IsMember({"auto", "hierarchical", "global"}));
  app.add_option("--current", current, "the deployed expert map JSON to compare against (default: trivial)");
  app.add_option("--output", output, "write the new expert map JSON here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto policy = ds::ParseEplbPolicy(policy_name);
  if (!policy.ok()) return Fail(policy.status());
  o.policy = *policy;

  std::ifstream f(load_file);
  if (!f) return Fail(ds::NotFound("cannot open '" + load_file + "'"));
  std::stringstream ss;
  ss << f.rdbuf();
  auto load = ds::ParseExpertLoadJson(ss.str());
  if (!load.ok()) return Fail(ds::Status(load.status().code(), load_file + ": " + load.status().message()));
  const int layers = static_cast<int>(load->size());
  const int E = static_cast<int>((*load)[0].size());

  auto res = ds::RebalanceExperts(*load, o);
  if (!res.ok()) return Fail(res.status());
  auto after = ds::ExpertMap::FromPhysicalToLogical(res->physical_to_logical, E);
  if (!after.ok()) return Fail(ds::Internal("rebalancer produced an invalid map: " + after.status().message()));

  ds::ExpertMap before;
  if (!current.empty()) {
    auto m = ds::ExpertMap::LoadFile(current, E);
    if (!m.ok()) return Fail(m.status());
    if (m->num_layers() != layers)
      return Fail(ds::InvalidArgument("--current map has " + std::to_string(m->num_layers()) +
                                      " layers, the load has " + std::to_string(layers)));
    if (m->num_physical() % o.num_gpus != 0)
      return Fail(ds::InvalidArgument("--current map has " + std::to_string(m->num_physical()) +
                                      " slots, not a multiple of --num-gpus " + std::to_string(o.num_gpus)));
    before = std::move(m).value();
  } else {
    before = ds::ExpertMap::Trivial(layers, E, o.num_physical);
  }

  std::printf("eplb: %d layers, %d logical experts, %d physical slots on %d GPUs (%d nodes, %d groups), policy %s\n",
              layers, E, o.num_physical, o.num_gpus, o.num_nodes, o.num_groups, ds::EplbPolicyName(res->policy));
  std::printf("%-6s %10s %10s %12s %12s %9s\n", "layer", "bal_before", "bal_after", "max_gpu_bef", "max_gpu_aft",
              "max_repl");
  double sum_before = 0, sum_after = 0;
  int active = 0;
  for (int l = 0; l < layers; ++l) {
    double total = 0;
    for (double v : (*load)[l]) total += v;
    if (total <= 0) {
      std::printf("%-6d %10s %10s %12s %12s %9s\n", l, "idle", "idle", "-", "-", "-");
      continue;
    }
    const auto gb = ds::GpuLoads((*load)[l], before.physical_to_logical(l), o.num_gpus);
    const auto ga = ds::GpuLoads((*load)[l], after->physical_to_logical(l), o.num_gpus);
    const double bb = ds::Balancedness(gb), ba = ds::Balancedness(ga);
    int most = 1;
    for (int e = 0; e < E; ++e) most = std::max(most, after->replica_count(l, e));
    std::printf("%-6d %10.4f %10.4f %12.1f %12.1f %9d\n", l, bb, ba, *std::max_element(gb.begin(), gb.end()),
                *std::max_element(ga.begin(), ga.end()), most);
    sum_before += bb;
    sum_after += ba;
    ++active;
  }
  if (active > 0)
    std::printf("mean balancedness over %d active layers: before %.4f, after %.4f\n", active, sum_before / active,
                sum_after / active);
  if (!output.empty()) {
    ds::Status st = after->SaveFile(output);
    if (!st.ok()) return Fail(st);
    std::printf("wrote %s\n", output.c_str());
  }
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(eplb, "rebalance MoE experts over GPUs from measured loads (EPLB map with redundant experts)",
                    RunEplb);
