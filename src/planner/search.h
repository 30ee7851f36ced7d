// Layout search and the throughput/latency frontier for `dsinfer plan`.
#pragma once

#include <string>
#include <vector>

#include "planner/perf_model.h"

namespace ds::planner {

struct SearchOptions {
  int max_devices = 0;  // 0: up to 32 nodes (or the whole scale-up domain when it is larger)
  int top = 5;          // layouts kept per role
};

// Candidate layouts per role (documented in docs/design/planner.md): instance sizes of
// 1..32 nodes, attention TP 1/2/4/8, both MoE communication schemes, micro-batch overlap on
// and off, 0 or the fewest redundant experts that make (n_routed + r) divisible by EP.
std::vector<InstanceLayout> CandidateLayouts(const PlanContext& ctx, Role role, int max_devices);

// Evaluates every candidate at its best batch under the SLO; feasible ones sorted by
// per-device throughput, best first (at most `top`).
// `all` (optional) receives every evaluated candidate, feasible or not, for explanations.
std::vector<RoleResult> SearchRole(const PlanContext& ctx, const Deployment& base, Role role, const SearchOptions& opt,
                                   std::vector<RoleResult>* all = nullptr);

// P/D ratio: prefill instances per decode instance so that prefill request throughput
// matches decode's, and the whole deployment's output tok/s per device.
struct PdSplit {
  int prefill_instances = 0, decode_instances = 0, devices = 0;
  double output_tok_s_per_device = 0;  // sustained output tokens/s over all devices used
  double requests_per_s = 0;
};
// With total_devices > 0 the best integral split within that many devices; else with
// workload.concurrency > 0 enough decode instances to hold that many requests and the prefill
// instances to feed them; otherwise one decode instance and the prefill instances it needs.
PdSplit SplitPd(const PlanContext& ctx, const RoleResult& prefill, const RoleResult& decode, int total_devices);

// A point of the decode frontier: one layout at one batch.
struct FrontierPoint {
  double tok_s_per_user = 0, per_device_tok_s = 0, batch = 0, tpot_ms = 0;
  std::string layout;
};
// Sweeps the batch of each given decode layout (memory-feasible points, no SLO), and
// returns (all points, the Pareto frontier sorted by tok/s per user).
std::pair<std::vector<FrontierPoint>, std::vector<FrontierPoint>> DecodeFrontier(
    const PlanContext& ctx, const Deployment& base, const std::vector<InstanceLayout>& layouts);

// SVG plot of the frontier (no dependencies). `slo_tok_s_per_user` > 0 draws the SLO line.
std::string FrontierSvg(const std::vector<FrontierPoint>& points, const std::vector<FrontierPoint>& frontier,
                        const std::string& title, double slo_tok_s_per_user);

}  // namespace ds::planner
