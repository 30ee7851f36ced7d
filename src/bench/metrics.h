// Serving-benchmark metrics: per-request outcomes -> the figures vllm bench serve and
// sglang.bench_serving report (request/token throughput, TTFT/TPOT/ITL/E2E percentiles, SLO
// attainment / goodput).
//
// Definitions (all times in seconds inside the structs, reported in ms):
// - TTFT: send of the request (before connect) -> first streamed chunk carrying output text.
// - ITL: gap between consecutive content chunks of one request (one value per gap; a chunk
//   may carry several tokens, as in vLLM's benchmark).
// - TPOT (per request): (E2E - TTFT) / (output_tokens - 1); only requests with >= 2 output
//   tokens contribute.
// - E2E: send -> end of the stream.
// - Throughputs divide totals over successful requests by the benchmark duration
//   (first dispatch -> last completion). Per-GPU output throughput = output tok/s / num_gpus.
// - SLO attainment: fraction of *all* requests (failed ones count as misses) that succeeded
//   with TTFT <= slo_ttft_ms and TPOT <= slo_tpot_ms (an unset SLO is always met);
//   goodput = those requests / duration (vLLM's "request goodput").
// Percentiles use linear interpolation between closest ranks (numpy's default), so
// vLLM/SGLang numbers computed from the same samples match.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::bench {

// Linear-interpolated percentile (numpy.percentile default), p in [0, 100]. `values` need not
// be sorted. Empty input -> 0.
double Percentile(std::vector<double> values, double p);

struct Summary {
  size_t count = 0;
  double mean = 0, std = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
// Mean, population std, median, p90, p99, min, max of `values` (all 0 when empty).
Summary Summarize(std::vector<double> values);

// What one request produced. Times are seconds; start_s is relative to the benchmark start.
struct RequestOutcome {
  bool success = false;
  std::string error;        // empty on success
  int http_status = 0;      // 0: no HTTP response (connect/read failure)
  int prompt_tokens = 0;    // usage.prompt_tokens, else the dataset's input length
  int output_tokens = 0;    // usage.completion_tokens, else the number of content chunks
  bool usage_reported = false;
  int cached_tokens = -1;   // usage.prompt_tokens_details.cached_tokens; -1 = not reported
  double start_s = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;  // gaps between content chunks
  // False when the server generated tokens (usage) but streamed none with text: TTFT is then
  // the arrival of the final chunk, and the request has no TPOT sample.
  bool tokens_streamed = true;
};

struct SloConfig {
  double ttft_ms = 0;  // <= 0: no TTFT objective
  double tpot_ms = 0;  // <= 0: no TPOT objective
  bool any() const { return ttft_ms > 0 || tpot_ms > 0; }
};

// True if `r` succeeded and meets every set objective.
bool MeetsSlo(const RequestOutcome& r, const SloConfig& slo);

struct BenchMetrics {
  int completed = 0, failed = 0;
  double duration_s = 0;
  long long total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0;       // req/s (successful)
  double input_throughput = 0;         // tok/s
  double output_throughput = 0;        // tok/s
  double output_throughput_per_gpu = 0;
  double total_throughput = 0;         // input + output tok/s
  double mean_concurrency = 0;         // sum of E2E / duration
  int num_gpus = 1;
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  SloConfig slo;
  int slo_met = 0;
  double slo_attainment = 0;  // fraction of all requests
  double goodput = 0;         // req/s meeting the SLO
  // Prefix cache as reported by the server (usage.prompt_tokens_details.cached_tokens);
  // -1 when no response reported it.
  double cached_token_fraction = -1;
  std::vector<std::string> first_errors;  // up to 5 distinct error strings
  // Token chunks the successful requests streamed (ITL samples + 1 per request with tokens);
  // well below total_output_tokens means the server packs several tokens per chunk.
  long long streamed_chunks = 0;
};

BenchMetrics ComputeMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                            int num_gpus, const SloConfig& slo);

// The human-readable table (vLLM-style), ending in a rule line.
std::string FormatReport(const BenchMetrics& m, int max_concurrency, double request_rate);

// Flat JSON with the same keys vLLM writes where they exist (completed, duration,
// request_throughput, output_throughput, mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ...),
// plus p90_*, output_throughput_per_gpu, slo_attainment, goodput.
nlohmann::json MetricsToJson(const BenchMetrics& m);

}  // namespace ds::bench
