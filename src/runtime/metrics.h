// Prometheus-style histograms and the engine's counters/gauges snapshot (/metrics).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ds {

// Cumulative-bucket histogram (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Appends the Prometheus text for metric `name` (with # HELP/# TYPE lines) to `out`.
  void Render(const std::string& name, const std::string& help, const std::string& labels,
              std::string* out) const;
  uint64_t count() const;

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
};

}  // namespace ds
