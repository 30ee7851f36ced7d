// EngineGroup: data-parallel serving over several engines (DP ranks), each with its own model
// runner (GPU) and latent KV cache. New requests go to a rank chosen by a DpPolicy
// (scheduler/dp_policy.h; default minimum_tokens: the least attention cost); aborts follow
// the request to its rank; stats and latency histograms are the sums over ranks. With one
// engine it is a thin pass-through, so the OpenAI server always talks to a group.
// Thread-safe like Engine.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/engine.h"
#include "scheduler/dp_policy.h"

namespace ds {

class EngineGroup {
 public:
  // `engines` (non-empty) must outlive the group; `policy` may be null for one engine.
  EngineGroup(std::vector<Engine*> engines, std::unique_ptr<DpPolicy> policy);

  // Engine::Add on the chosen rank (RESOURCE_EXHAUSTED when no rank accepts). The request's
  // id must be unique across the group.
  Status Add(EngineRequest req);
  void Abort(uint64_t request_id);
  void StopAdmission();
  bool admission_stopped() const;  // true when every rank stopped admission
  int num_in_flight() const;
  int max_model_len() const;       // the smallest over ranks
  EngineStats Stats() const;       // sums over ranks
  // Prometheus text of one of the engines' latency histograms (e.g. &Engine::ttft) summed over
  // ranks.
  using HistogramOf = const Histogram& (Engine::*)() const;
  void RenderHistogram(HistogramOf which, const std::string& name, const std::string& help,
                       const std::string& labels, std::string* out) const;

  int size() const { return static_cast<int>(engines_.size()); }
  Engine* rank(int r) const { return engines_[r]; }
  // The rank holding a request in flight, or -1.
  int RankOf(uint64_t request_id) const;
  const char* policy_name() const { return policy_ ? policy_->name() : "single"; }

 private:
  std::vector<Engine*> engines_;
  std::unique_ptr<DpPolicy> policy_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, int> rank_of_;  // requests in flight -> rank
};

}  // namespace ds
