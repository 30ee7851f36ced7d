// Prometheus-style histograms and the engine's counters/gauges snapshot (/metrics).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ds {

// Cumulative-bucket histogram (seconds). Thread-safe.
// Bucket upper bounds (seconds) of the engine's latency histograms (TTFT, TPOT, ITL, E2E,
// queue time), vLLM-like.
std::vector<double> LatencyBuckets();

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Appends the Prometheus text for metric `name` (with # HELP/# TYPE lines) to `out`.
  void Render(const std::string& name, const std::string& help, const std::string& labels,
              std::string* out) const;
  uint64_t count() const;
  // Adds this histogram's buckets, sum and count into `into` (same bounds required), e.g. to
  // render the sum over DP ranks.
  void AddTo(Histogram* into) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_blocks_total = 0;
  int num_blocks_used = 0;
  int num_blocks_cached = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t num_preemptions = 0;
  int64_t requests_finished_stop = 0;
  int64_t requests_finished_length = 0;
  int64_t requests_finished_abort = 0;
  int64_t num_steps = 0;
  // Steps launched by overlap scheduling (EngineOptions::overlap_schedule) while the previous
  // step was still in flight.
  int64_t num_overlapped_steps = 0;
  // Adds every field of `o` (the totals over DP ranks).
  void Add(const EngineStats& o) {
    num_running += o.num_running; num_waiting += o.num_waiting;
    num_blocks_total += o.num_blocks_total; num_blocks_used += o.num_blocks_used;
    num_blocks_cached += o.num_blocks_cached; prefix_query_tokens += o.prefix_query_tokens;
    prefix_hit_tokens += o.prefix_hit_tokens; prompt_tokens_total += o.prompt_tokens_total;
    generation_tokens_total += o.generation_tokens_total; num_preemptions += o.num_preemptions;
    requests_finished_stop += o.requests_finished_stop; requests_finished_length += o.requests_finished_length;
    requests_finished_abort += o.requests_finished_abort; num_steps += o.num_steps;
    num_overlapped_steps += o.num_overlapped_steps;
  }
};

}  // namespace ds
