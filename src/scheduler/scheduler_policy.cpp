#include "scheduler/scheduler_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ds {

namespace {
int BlocksFor(int tokens, int bs) { return (tokens + bs - 1) / bs; }
// Output tokens reserved for a sequence: ratio x its remaining output, rounded up.
int ReservedOutput(const SchedSeq& s, double ratio) {
  return static_cast<int>(std::ceil(ratio * std::max(0, s.remaining_output)));
}
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

  // The running set's reserve (decode_reserve_ratio > 0): blocks each sequence not preempted
  // will still need beyond what it holds after this step.
  const double ratio = limits_.decode_reserve_ratio;
  int64_t reserved = 0;
  if (ratio > 0) {
    std::vector<int> held(running.size());
    for (size_t i = 0; i < last; ++i) held[i] = running[i].num_blocks;
    for (const ScheduledSeq& sc : d.scheduled)
      for (size_t i = 0; i < last; ++i)
        if (running[i].id == sc.id)
          held[i] = std::max(held[i], BlocksFor(running[i].num_computed + sc.num_new_tokens, bs));
    for (size_t i = 0; i < last; ++i) {
      const SchedSeq& s = running[i];
      reserved += std::max(0, BlocksFor(s.num_tokens + ReservedOutput(s, ratio), bs) - held[i]);
    }
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
      if (ratio > 0 && num_running > 0) {
        // Its whole prompt and reserved output, after the reserve of those admitted before it
        // (an empty running set admits by the chunk alone: nothing else could free blocks).
        const int whole = BlocksFor(s.num_tokens + ReservedOutput(s, ratio), bs) - hit.num_blocks + hit.num_free_blocks;
        if (whole > free_blocks - reserved) break;
        reserved += whole - need;
      }
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
