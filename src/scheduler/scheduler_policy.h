// SchedulerPolicy: one pure decision per engine step. Given the running and waiting
// sequences (in priority order) and a read-only view of the KV cache, it decides which
// sequences run this step with how many new tokens, and which running sequences are
// preempted (by recompute) to make room. It owns nothing and changes nothing; the engine
// applies the decision. Unit-testable without a model (tests/scheduler).
#pragma once

#include <cstdint>
#include <vector>

namespace ds {

// What the policy sees of one sequence.
struct SchedSeq {
  int64_t id = 0;
  int num_tokens = 0;      // prompt + generated tokens that must be in the cache to sample next
  int num_computed = 0;    // tokens whose KV is already in this sequence's blocks
  int num_blocks = 0;      // blocks the sequence holds now
  int remaining_output = 0;  // tokens it may still generate (max_tokens - generated; admission reserve)
};

struct PrefixHit {
  int num_tokens = 0;      // cached prefix tokens (a multiple of the block size)
  int num_blocks = 0;      // = num_tokens / block size
  int num_free_blocks = 0; // of those, blocks with ref_count 0 (reviving them uses free blocks)
};

class CacheView {
 public:
  virtual ~CacheView() = default;
  virtual int block_size() const = 0;
  virtual int num_free_blocks() const = 0;
  // Prefix-cache lookup for a waiting sequence; always leaves >= 1 token to compute.
  virtual PrefixHit LookupPrefix(int64_t seq_id) const = 0;
};

struct SchedulerLimits {
  int max_num_batched_tokens = 8192;  // per-step token budget (prefill chunks + decodes)
  int max_running_requests = 256;     // sequences in the running set
  // Admission reserve (SGLang's new-token-ratio idea; serve's --schedule-conservativeness):
  // > 0 admits a waiting sequence only while the free blocks, less what the running set is
  // still expected to need (each sequence's uncomputed prompt plus this share of its remaining
  // output), cover its own whole uncomputed prompt plus this share of its output budget. Fewer
  // sequences run at once, so fewer are preempted (and recomputed) when the cache fills.
  // 0: vLLM v1's admission (blocks for this step's chunk only; a full cache is resolved by
  // preemption).
  double decode_reserve_ratio = 0.0;
};

struct ScheduledSeq {
  int64_t id = 0;
  int num_new_tokens = 0;     // tokens to compute this step
  int num_cached_tokens = 0;  // waiting sequences: prefix-cache hit assumed (else 0)
  bool from_waiting = false;
};

struct SchedulerDecision {
  std::vector<ScheduledSeq> scheduled;  // in batch order
  std::vector<int64_t> preempted;       // running sequences to preempt (free blocks, recompute)
  int num_batched_tokens = 0;
};

class SchedulerPolicy {
 public:
  virtual ~SchedulerPolicy() = default;
  virtual SchedulerDecision Schedule(const std::vector<SchedSeq>& running,
                                     const std::vector<SchedSeq>& waiting,
                                     const CacheView& cache) = 0;
};

// First-come-first-served with chunked prefill (vLLM v1-style):
//  1. running sequences in order each get min(remaining, budget) tokens; if their new blocks
//     do not fit, the lowest-priority running sequence (the last) is preempted until they do
//     (possibly the sequence itself);
//  2. if nothing was preempted, waiting sequences are admitted in order while the running
//     set is below max_running_requests, budget is left and their blocks fit (with
//     decode_reserve_ratio > 0: also their whole prompt and reserved output, after the running
//     set's reserve); the first that does not fit stops admission (no overtaking, so long
//     prompts cannot starve).
class FcfsPolicy : public SchedulerPolicy {
 public:
  explicit FcfsPolicy(SchedulerLimits limits) : limits_(limits) {}
  SchedulerDecision Schedule(const std::vector<SchedSeq>& running,
                             const std::vector<SchedSeq>& waiting,
                             const CacheView& cache) override;

 private:
  SchedulerLimits limits_;
};

}  // namespace ds
