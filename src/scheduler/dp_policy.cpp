#include "scheduler/dp_policy.h"

#include <atomic>

namespace ds {
namespace {

class RoundRobin : public DpPolicy {
 public:
  const char* name() const override { return "round_robin"; }
  int Choose(std::span<const DpRankLoad> loads, const DpRequestInfo&) override {
    const int n = static_cast<int>(loads.size());
    for (int i = 0; i < n; ++i) {
      const int r = static_cast<int>(next_.fetch_add(1) % static_cast<uint64_t>(n));
      if (loads[r].accepting) return r;
    }
    return -1;
  }

 private:
  std::atomic<uint64_t> next_{0};
};

// The accepting rank minimising key(load), ties by fewer requests, then the lowest rank.
template <typename Key>
int ArgMin(std::span<const DpRankLoad> loads, Key key) {
  int best = -1;
  for (int r = 0; r < static_cast<int>(loads.size()); ++r) {
    if (!loads[r].accepting) continue;
    if (best < 0 || key(loads[r]) < key(loads[best]) ||
        (key(loads[r]) == key(loads[best]) && loads[r].requests < loads[best].requests))
      best = r;
  }
  return best;
}

class ShortestQueue : public DpPolicy {
 public:
  const char* name() const override { return "shortest_queue"; }
  int Choose(std::span<const DpRankLoad> loads, const DpRequestInfo&) override {
    return ArgMin(loads, [](const DpRankLoad& l) { return l.requests; });
  }
};

class MinimumTokens : public DpPolicy {
 public:
  const char* name() const override { return "minimum_tokens"; }
  int Choose(std::span<const DpRankLoad> loads, const DpRequestInfo&) override {
    return ArgMin(loads, [](const DpRankLoad& l) { return l.context_tokens; });
  }
};

}  // namespace

StatusOr<std::unique_ptr<DpPolicy>> MakeDpPolicy(const std::string& method) {
  if (method == "round_robin") return std::unique_ptr<DpPolicy>(new RoundRobin());
  if (method == "shortest_queue") return std::unique_ptr<DpPolicy>(new ShortestQueue());
  if (method == "minimum_tokens") return std::unique_ptr<DpPolicy>(new MinimumTokens());
  return InvalidArgument("unknown load balance method '" + method +
                         "' (round_robin | shortest_queue | minimum_tokens)");
}

}  // namespace ds
