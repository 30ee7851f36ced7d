#include "scheduler/scheduler_policy.h"

#include <algorithm>

namespace ds {

namespace {
int BlocksFor(int tokens, int bs) { return (tokens + bs - 1) / bs; }
}  // namespace

SchedulerDecision FcfsPolicy::Schedule(const std::vector<SchedSeq>& running,
                                       const std::vector<SchedSeq>& waiting,
                                       const CacheView& cache) {
  SchedulerDecision d;
  const int bs = cache.block_size();
  int budget = limits_.max_num_batched_tokens;
  int free_blocks = cache.num_free_blocks();

  // 1. Running sequences. `last` is one past the lowest-priority sequence not preempted.
  size_t last = running.size();
  for (size_t i = 0; i < last && budget > 0; ++i) {
    const SchedSeq& s = running[i];
    int num_new = std::min(s.num_tokens - s.num_computed, budget);
    if (num_new <= 0) continue;
    int need = std::max(0, BlocksFor(s.num_computed + num_new, bs) - s.num_blocks);
    bool self_preempted = false;
    while (need > free_blocks) {
      // Preempt from the back (lowest priority) until it fits.
      --last;
      d.preempted.push_back(running[last].id);
      free_blocks += running[last].num_blocks;
      if (last == i) { self_preempted = true; break; }
    }
    if (self_preempted) break;
    free_blocks -= need;
    budget -= num_new;
    d.scheduled.push_back({s.id, num_new, 0, false});
  }

  // 2. Waiting sequences (only when nothing had to be preempted).
  int num_running = static_cast<int>(last);
  if (d.preempted.empty()) {
    for (const SchedSeq& s : waiting) {
      if (budget <= 0 || num_running >= limits_.max_running_requests) break;
      PrefixHit hit = cache.LookupPrefix(s.id);
      int cached = std::min(hit.num_tokens, s.num_tokens - 1);
      int num_new = std::min(s.num_tokens - cached, budget);
      int need = BlocksFor(cached + num_new, bs) - hit.num_blocks + hit.num_free_blocks;
      if (need > free_blocks) break;
      free_blocks -= need;
      budget -= num_new;
      ++num_running;
      d.scheduled.push_back({s.id, num_new, cached, true});
    }
  }
  d.num_batched_tokens = limits_.max_num_batched_tokens - budget;
  return d;
}

}  // namespace ds
