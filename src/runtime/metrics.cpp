#include "runtime/metrics.h"

#include <cstdio>

namespace ds {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::AddTo(Histogram* into) const {
  if (into == this) return;
  std::scoped_lock lock(mu_, into->mu_);
  if (into->bounds_ != bounds_) return;  // different buckets: nothing sensible to add
  for (size_t i = 0; i < counts_.size(); ++i) into->counts_[i] += counts_[i];
  into->sum_ += sum_;
  into->count_ += count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::Render(const std::string& name, const std::string& help,
                       const std::string& labels, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  char buf[256];
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    std::snprintf(buf, sizeof(buf), "%s_bucket{%s%sle=\"%g\"} %llu\n", name.c_str(),
                  labels.c_str(), sep.c_str(), bounds_[i], static_cast<unsigned long long>(cum));
    *out += buf;
  }
  cum += counts_.back();
  std::snprintf(buf, sizeof(buf), "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name.c_str(),
                labels.c_str(), sep.c_str(), static_cast<unsigned long long>(cum));
  *out += buf;
  std::snprintf(buf, sizeof(buf), "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name.c_str(),
                labels.c_str(), sum_, name.c_str(), labels.c_str(),
                static_cast<unsigned long long>(count_));
  *out += buf;
}

}  // namespace ds
