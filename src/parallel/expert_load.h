// ExpertLoadRecorder: per-layer token counts of the MoE routing decisions, the input of the
// EPLB rebalancer (parallel/eplb.h). For every MoE layer and every forward it adds, per routed
// (token, k) pair, one to the chosen logical expert and one to the physical slot that served it.
// Counts accumulate across forwards until Reset(); Snapshot() copies them out.
//
// Units: tokens (a token routed to top_k experts counts once for each). Shapes:
//   logical  [num_layers][num_logical]   physical [num_layers][num_physical]
// Dense layers keep zero rows. Not thread-safe: the owner (one model runner) records from its
// forward thread; snapshot between forwards.
//
// Snapshot JSON (the "logical_count" key is the one SGLang's expert-distribution dumps and
// --init-expert-location use; `dsinfer eplb --load` reads it):
//   {"num_forwards": F, "logical_count": [[...]...], "physical_count": [[...]...]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct ExpertLoadSnapshot {
  int64_t num_forwards = 0;
  std::vector<std::vector<int64_t>> logical;   // [layers][num_logical] tokens
  std::vector<std::vector<int64_t>> physical;  // [layers][num_physical] tokens
  std::string ToJson() const;
};

class ExpertLoadRecorder {
 public:
  ExpertLoadRecorder() = default;
  ExpertLoadRecorder(int num_layers, int num_logical, int num_physical);

  int num_layers() const { return static_cast<int>(logical_.size()); }
  int num_logical() const { return num_logical_; }
  int num_physical() const { return num_physical_; }

  // Adds `count` routed pairs of `layer`: logical_ids[i] (in [0, num_logical)) served by
  // physical_ids[i] (in [0, num_physical)). Ids are checked (DS_CHECK).
  void Record(int layer, const int32_t* logical_ids, const int32_t* physical_ids, int64_t count);
  // Marks the end of one forward (counts how many forwards the totals cover).
  void EndForward() { ++num_forwards_; }

  ExpertLoadSnapshot Snapshot() const { return {num_forwards_, logical_, physical_}; }
  void Reset();

 private:
  int num_logical_ = 0, num_physical_ = 0;
  int64_t num_forwards_ = 0;
  std::vector<std::vector<int64_t>> logical_;
  std::vector<std::vector<int64_t>> physical_;
};

}  // namespace ds
