#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

namespace ds::bench {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  p = std::clamp(p, 0.0, 100.0);
  // numpy "linear": rank = p/100 * (n-1), interpolate between floor and ceil.
  double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double var = 0;
  for (double v : values) var += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(var / n);
  s.median = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

namespace {
// TPOT of one request in seconds, or NaN when it has fewer than 2 output tokens.
double RequestTpot(const RequestOutcome& r) {
  if (r.output_tokens < 2 || !r.tokens_streamed) return std::numeric_limits<double>::quiet_NaN();
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}
}  // namespace

bool MeetsSlo(const RequestOutcome& r, const SloConfig& slo) {
  if (!r.success) return false;
  if (slo.ttft_ms > 0 && r.ttft_s * 1e3 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0) {
    double tpot = RequestTpot(r);
    if (!std::isnan(tpot) && tpot * 1e3 > slo.tpot_ms) return false;
  }
  return true;
}

BenchMetrics ComputeMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                            int num_gpus, const SloConfig& slo) {
  BenchMetrics m;
  m.duration_s = duration_s;
  m.num_gpus = std::max(1, num_gpus);
  m.slo = slo;
  std::vector<double> ttft, tpot, itl, e2e;
  double e2e_sum = 0;
  long long cached = 0, cached_prompt = 0;
  bool any_cached = false;
  for (const auto& r : outcomes) {
    if (!r.success) {
      ++m.failed;
      if (m.first_errors.size() < 5 &&
          std::find(m.first_errors.begin(), m.first_errors.end(), r.error) == m.first_errors.end())
        m.first_errors.push_back(r.error);
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    e2e_sum += r.e2e_s;
    double t = RequestTpot(r);
    if (!std::isnan(t)) tpot.push_back(t * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    if (r.tokens_streamed) m.streamed_chunks += static_cast<long long>(r.itl_s.size()) + 1;
    if (r.cached_tokens >= 0) {
      any_cached = true;
      cached += r.cached_tokens;
      cached_prompt += r.prompt_tokens;
    }
    if (MeetsSlo(r, slo)) ++m.slo_met;
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.input_throughput = static_cast<double>(m.total_input_tokens) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_throughput = m.input_throughput + m.output_throughput;
    m.output_throughput_per_gpu = m.output_throughput / m.num_gpus;
    m.mean_concurrency = e2e_sum / duration_s;
    m.goodput = m.slo_met / duration_s;
  }
  if (!outcomes.empty()) m.slo_attainment = static_cast<double>(m.slo_met) / outcomes.size();
  if (any_cached && cached_prompt > 0)
    m.cached_token_fraction = static_cast<double>(cached) / static_cast<double>(cached_prompt);
  m.ttft_ms = Summarize(std::move(ttft));
  m.tpot_ms = Summarize(std::move(tpot));
  m.itl_ms = Summarize(std::move(itl));
  m.e2e_ms = Summarize(std::move(e2e));
  return m;
}

namespace {
void Line(std::string* out, const char* label, double v, int prec = 2) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-42s%.*f\n", label, prec, v);
  *out += buf;
}
void LineI(std::string* out, const char* label, long long v) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-42s%lld\n", label, v);
  *out += buf;
}
void Header(std::string* out, const std::string& title, char fill) {
  const int width = 50;
  int pad = width - static_cast<int>(title.size()) - 2;
  if (title.empty()) {
    *out += std::string(width, fill) + "\n";
    return;
  }
  int left = pad / 2, right = pad - left;
  *out += std::string(std::max(left, 1), fill) + " " + title + " " +
          std::string(std::max(right, 1), fill) + "\n";
}
void Block(std::string* out, const char* title, const char* name, const Summary& s) {
  Header(out, title, '-');
  std::string n(name);
  Line(out, ("Mean " + n + " (ms):").c_str(), s.mean);
  Line(out, ("Median " + n + " (ms):").c_str(), s.median);
  Line(out, ("P90 " + n + " (ms):").c_str(), s.p90);
  Line(out, ("P99 " + n + " (ms):").c_str(), s.p99);
}
}  // namespace

std::string FormatReport(const BenchMetrics& m, int max_concurrency, double request_rate) {
  std::string out;
  Header(&out, "Serving Benchmark Result", '=');
  LineI(&out, "Successful requests:", m.completed);
  LineI(&out, "Failed requests:", m.failed);
  if (max_concurrency > 0) LineI(&out, "Maximum request concurrency:", max_concurrency);
  if (std::isinf(request_rate)) {
    out += "Request rate (req/s):                     inf\n";
  } else {
    Line(&out, "Request rate (req/s):", request_rate);
  }
  Line(&out, "Benchmark duration (s):", m.duration_s);
  LineI(&out, "Total input tokens:", m.total_input_tokens);
  LineI(&out, "Total generated tokens:", m.total_output_tokens);
  Line(&out, "Request throughput (req/s):", m.request_throughput);
  Line(&out, "Input token throughput (tok/s):", m.input_throughput);
  Line(&out, "Output token throughput (tok/s):", m.output_throughput);
  char label[80];
  std::snprintf(label, sizeof(label), "Output tok/s per GPU (%d GPU%s):", m.num_gpus,
                m.num_gpus == 1 ? "" : "s");
  Line(&out, label, m.output_throughput_per_gpu);
  Line(&out, "Total token throughput (tok/s):", m.total_throughput);
  Line(&out, "Mean concurrency:", m.mean_concurrency);
  if (m.cached_token_fraction >= 0) Line(&out, "Prefix cache hit rate (%):", 100 * m.cached_token_fraction);
  Block(&out, "Time to First Token", "TTFT", m.ttft_ms);
  Block(&out, "Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
  Block(&out, "Inter-token Latency", "ITL", m.itl_ms);
  Block(&out, "End-to-end Latency", "E2E", m.e2e_ms);
  if (m.slo.any()) {
    Header(&out, "SLO attainment", '-');
    std::string slo = "SLO:";
    char buf[64];
    if (m.slo.ttft_ms > 0) { std::snprintf(buf, sizeof(buf), " TTFT<=%gms", m.slo.ttft_ms); slo += buf; }
    if (m.slo.tpot_ms > 0) { std::snprintf(buf, sizeof(buf), " TPOT<=%gms", m.slo.tpot_ms); slo += buf; }
    out += slo + "\n";
    Line(&out, "SLO attainment (%):", 100 * m.slo_attainment);
    Line(&out, "Goodput (req/s):", m.goodput);
  }
  // Several tokens per streamed chunk (e.g. a server holding back incomplete UTF-8 text): TTFT
  // and ITL then time chunks, not tokens. Said when fewer than half the tokens had a chunk.
  if (m.completed > 0 && m.total_output_tokens >= 2 * m.completed && 2 * m.streamed_chunks < m.total_output_tokens) {
    char note[320];
    std::snprintf(note, sizeof(note),
                  "note: %lld tokens arrived in %lld streamed chunks, so TTFT and ITL time chunks; with dsinfer or "
                  "vLLM pass --extra-body '{\"return_token_ids\": true}' to stream every token\n",
                  m.total_output_tokens, m.streamed_chunks);
    out += note;
  }
  if (!m.first_errors.empty()) {
    Header(&out, "Errors (first distinct)", '-');
    bool vocab_hint = false;
    for (const auto& e : m.first_errors) {
      out += "  " + e.substr(0, 200) + "\n";
      vocab_hint = vocab_hint || e.find("outside the vocabulary") != std::string::npos;
    }
    if (vocab_hint)
      out += "  hint: the random prompt ids exceed the server's vocabulary: pass --vocab-size N (the model's) "
             "or --tokenizer DIR\n";
  }
  Header(&out, "", '=');
  return out;
}

nlohmann::json MetricsToJson(const BenchMetrics& m) {
  nlohmann::json j;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["duration"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["input_throughput"] = m.input_throughput;
  j["output_throughput"] = m.output_throughput;
  j["output_throughput_per_gpu"] = m.output_throughput_per_gpu;
  j["total_token_throughput"] = m.total_throughput;
  j["mean_concurrency"] = m.mean_concurrency;
  j["num_gpus"] = m.num_gpus;
  auto put = [&](const char* name, const Summary& s) {
    std::string n(name);
    j["mean_" + n + "_ms"] = s.mean;
    j["median_" + n + "_ms"] = s.median;
    j["std_" + n + "_ms"] = s.std;
    j["p90_" + n + "_ms"] = s.p90;
    j["p99_" + n + "_ms"] = s.p99;
  };
  put("ttft", m.ttft_ms);
  put("tpot", m.tpot_ms);
  put("itl", m.itl_ms);
  put("e2el", m.e2e_ms);
  if (m.slo.ttft_ms > 0) j["slo_ttft_ms"] = m.slo.ttft_ms;
  if (m.slo.tpot_ms > 0) j["slo_tpot_ms"] = m.slo.tpot_ms;
  j["slo_attainment"] = m.slo_attainment;
  j["request_goodput"] = m.goodput;
  if (m.cached_token_fraction >= 0) j["prefix_cache_hit_rate"] = m.cached_token_fraction;
  j["streamed_chunks"] = m.streamed_chunks;
  j["errors"] = m.first_errors;
  return j;
}

}  // namespace ds::bench
