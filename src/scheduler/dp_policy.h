// Data-parallel request placement: which DP rank (one engine with its own runner and KV cache)
// takes a new request. A policy is a small class with one call: (rank loads, request) -> rank.
//
// Methods (SGLang's `--load-balance-method` names):
//   round_robin     ranks in turn;
//   shortest_queue  the rank with the fewest requests in flight (queued + running);
//   minimum_tokens  the rank with the least attention cost: the sum of the context lengths
//                   (prompt + generated tokens) of its requests in flight, the quantity decode
//                   attention reads every step (SYSTEM.md: balance DP ranks by attention cost,
//                   not by request count). Ties go to the fewest requests, then the lowest rank.
// Ranks that do not accept requests (admission stopped) are skipped; Choose returns -1 when
// none accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace ds {

struct DpRankLoad {
  int64_t requests = 0;        // in flight: queued + running
  int64_t context_tokens = 0;  // prompt + generated tokens of those requests
  bool accepting = true;
};

struct DpRequestInfo {
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
};

class DpPolicy {
 public:
  virtual ~DpPolicy() = default;
  virtual const char* name() const = 0;
  // loads[r]: rank r's load now. Returns the chosen rank, or -1 if no rank accepts.
  virtual int Choose(std::span<const DpRankLoad> loads, const DpRequestInfo& req) = 0;
};

// INVALID_ARGUMENT for an unknown method name.
StatusOr<std::unique_ptr<DpPolicy>> MakeDpPolicy(const std::string& method);

}  // namespace ds
