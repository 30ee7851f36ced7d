// `dsinfer bench dp-balance`: how the DP placement policies (scheduler/dp_policy.h) balance
// attention cost across data-parallel ranks on a request trace. A simulation, not a GPU run.
//
// Model: with DP attention and expert-parallel MoE, the ranks run every layer in lockstep (the
// MoE dispatch/combine collectives), so a decode step lasts as long as the slowest rank. That
// rank is the one whose requests hold the most context: decode attention reads every context
// token's latent vector each step. A step costs step_base_ms, for the MoE, dense layers and
// collectives, plus attn_ms_per_mtok for each million context tokens on the busiest rank.
// With the default attn_ms_per_mtok of 23.4, one million tokens of DeepSeek-V3 latent cache
// (70,272 B per token, bf16, 61 layers) streams at about 3 TB/s.
// - Requests arrive at their trace timestamps (times --trace-time-scale) and are placed by the
//   policy on a rank with a free slot (`--max-running` per rank); otherwise they wait in order.
// - A placed request adds its prompt to the rank's context, then generates one token per step
//   until its output length; prefill compute is not modelled.
//
// Reported per policy:
// - imbalance: the step-weighted mean of max/mean context over ranks (1.0 = balanced);
// - straggler cost: the share of the attention time spent beyond the mean rank;
// - simulated duration and output tok/s.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "scheduler/dp_policy.h"
#include "tools/command.h"

namespace ds::tools {
namespace {

struct SimResult {
  std::string method;
  double imbalance = 0, straggler_share = 0, duration_s = 0, output_tok_s = 0, mean_step_ms = 0;
  int64_t steps = 0, tokens = 0;
};

struct Running { int64_t context; int remaining; };

SimResult Simulate(const std::vector<bench::BenchRequest>& reqs, int dp, int max_running, double base_ms,
                   double attn_ms_per_mtok, DpPolicy* policy) {
  SimResult r;
  r.method = policy->name();
  std::vector<std::vector<Running>> ranks(dp);
  std::vector<DpRankLoad> loads(dp);  // kept in step with `ranks`
  int64_t running = 0;
  std::deque<size_t> waiting;
  size_t next = 0;
  double now = 0, sum_ratio_w = 0, sum_w = 0, attn_max_total = 0, attn_mean_total = 0;
  while (next < reqs.size() || !waiting.empty() || running > 0) {
    while (next < reqs.size() && reqs[next].arrival_s <= now) waiting.push_back(next++);
    // Place waiting requests in order while some rank has a slot.
    while (!waiting.empty()) {
      const bench::BenchRequest& q = reqs[waiting.front()];
      const int k = policy->Choose(loads, {q.input_len, q.output_len});
      if (k < 0) break;
      ranks[k].push_back({q.input_len, std::max(1, q.output_len)});
      loads[k].requests += 1;
      loads[k].context_tokens += q.input_len;
      loads[k].accepting = loads[k].requests < max_running;
      ++running;
      waiting.pop_front();
    }
    int64_t mx = 0, sum = 0;
    for (const auto& x : loads) { mx = std::max(mx, x.context_tokens); sum += x.context_tokens; }
    if (running == 0) {  // idle: jump to the next arrival
      if (next < reqs.size()) now = std::max(now, reqs[next].arrival_s);
      continue;
    }
    const double mean = static_cast<double>(sum) / dp;
    const double step_ms = base_ms + attn_ms_per_mtok * static_cast<double>(mx) / 1e6;
    sum_ratio_w += (mean > 0 ? static_cast<double>(mx) / mean : 1.0) * step_ms;
    sum_w += step_ms;
    attn_max_total += attn_ms_per_mtok * static_cast<double>(mx) / 1e6;
    attn_mean_total += attn_ms_per_mtok * mean / 1e6;
    now += step_ms / 1e3;
    ++r.steps;
    for (int k = 0; k < dp; ++k) {
      for (Running& x : ranks[k]) { ++x.context; --x.remaining; ++r.tokens; }
      loads[k].context_tokens += static_cast<int64_t>(ranks[k].size());
      for (const Running& x : ranks[k])
        if (x.remaining <= 0) loads[k].context_tokens -= x.context;
      const size_t before = ranks[k].size();
      std::erase_if(ranks[k], [](const Running& x) { return x.remaining <= 0; });
      const auto done = static_cast<int64_t>(before - ranks[k].size());
      loads[k].requests -= done;
      loads[k].accepting = loads[k].requests < max_running;
      running -= done;
    }
  }
  r.imbalance = sum_w > 0 ? sum_ratio_w / sum_w : 1.0;
  r.straggler_share = attn_max_total > 0 ? (attn_max_total - attn_mean_total) / attn_max_total : 0.0;
  r.duration_s = now;
  r.output_tok_s = now > 0 ? static_cast<double>(r.tokens) / now : 0.0;
  r.mean_step_ms = r.steps ? sum_w / static_cast<double>(r.steps) : 0.0;
  return r;
}

int RunDpBalance(int argc, char** argv) {
  CLI::App app{"Simulate DP placement policies on a request trace (attention cost per rank)",
               "dsinfer bench dp-balance"};
  std::string trace, output_file;
  int dp = 8, max_running = 256, max_requests = 0;
  double time_scale = 1.0, duration_s = 600, base_ms = 20.0, attn_ms_per_mtok = 23.4;
  std::vector<std::string> methods = {"round_robin", "shortest_queue", "minimum_tokens"};
  app.add_option("--trace", trace, "trace JSONL (timestamp ms, input_length, output_length)")->required();
  app.add_option("--dp-size", dp, "data-parallel ranks")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--max-running", max_running, "running requests per rank")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--trace-time-scale", time_scale, "arrival time = timestamp x scale")->check(CLI::Range(1e-6, 1e6))
      ->capture_default_str();
  app.add_option("--trace-duration-s", duration_s, "replay the first N seconds of the trace (0 = all)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--max-requests", max_requests, "at most this many requests (0 = all)")->check(CLI::Range(0, 1 << 30));
  app.add_option("--step-base-ms", base_ms, "step time besides attention (MoE, dense, collectives)")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  app.add_option("--attn-ms-per-mtok", attn_ms_per_mtok, "attention time per million context tokens on a rank")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--load-balance-methods", methods, "policies to compare")
      ->check(CLI::IsMember({"round_robin", "shortest_queue", "minimum_tokens"}));
  app.add_option("--output-file", output_file, "write the results as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  bench::TraceOptions to;
  to.time_scale = time_scale;
  to.duration_s = duration_s;
  to.max_requests = max_requests;
  bench::TraceStats ts;
  auto reqs = bench::LoadTrace(trace, to, &ts);
  if (!reqs.ok()) {
    std::fprintf(stderr, "dsinfer bench dp-balance: %s\n", reqs.status().ToString().c_str());
    return 1;
  }
  std::printf("trace %s: %zu requests, %lld prompt tokens; %d DP ranks x %d running; step = %.1f ms + %.1f ms per "
              "million context tokens on the busiest rank\n",
              trace.c_str(), reqs->size(), static_cast<long long>(ts.input_tokens), dp, max_running, base_ms,
              attn_ms_per_mtok);
  std::printf("%-16s %10s %10s %12s %12s %12s\n", "method", "imbalance", "straggler", "duration_s", "mean_step_ms",
              "output_tok/s");
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& m : methods) {
    auto policy = MakeDpPolicy(m);
    if (!policy.ok()) {
      std::fprintf(stderr, "dsinfer bench dp-balance: %s\n", policy.status().ToString().c_str());
      return 2;
    }
    const SimResult r = Simulate(*reqs, dp, max_running, base_ms, attn_ms_per_mtok, policy->get());
    std::printf("%-16s %10.3f %9.1f%% %12.1f %12.2f %12.1f\n", r.method.c_str(), r.imbalance,
                100.0 * r.straggler_share, r.duration_s, r.mean_step_ms, r.output_tok_s);
    out.push_back({{"method", r.method}, {"imbalance", r.imbalance}, {"straggler_share", r.straggler_share},
                   {"duration_s", r.duration_s}, {"mean_step_ms", r.mean_step_ms}, {"output_tok_s", r.output_tok_s},
                   {"steps", r.steps}, {"tokens", r.tokens}, {"dp_size", dp}, {"max_running", max_running},
                   {"step_base_ms", base_ms}, {"attn_ms_per_mtok", attn_ms_per_mtok}, {"requests", reqs->size()}});
  }
  if (!output_file.empty()) {
    FILE* f = std::fopen(output_file.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "dsinfer bench dp-balance: cannot write %s\n", output_file.c_str());
      return 1;
    }
    std::fprintf(f, "%s\n", out.dump(1).c_str());
    std::fclose(f);
  }
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND_NAMED(bench_dp_balance, "bench dp-balance",
                          "simulate DP placement policies on a trace (attention cost per rank)", RunDpBalance);

}  // namespace ds::tools
