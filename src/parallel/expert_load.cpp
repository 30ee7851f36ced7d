#include "parallel/expert_load.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace ds {

std::string ExpertLoadSnapshot::ToJson() const {
  nlohmann::json j;
  j["num_forwards"] = num_forwards;
  j["logical_count"] = logical;
  j["physical_count"] = physical;
  return j.dump() + "\n";
}

ExpertLoadRecorder::ExpertLoadRecorder(int num_layers, int num_logical, int num_physical)
    : num_logical_(num_logical),
      num_physical_(num_physical),
      logical_(num_layers, std::vector<int64_t>(num_logical, 0)),
      physical_(num_layers, std::vector<int64_t>(num_physical, 0)) {
  DS_CHECK(num_layers >= 0 && num_logical >= 0 && num_physical >= 0) << "ExpertLoadRecorder: negative size";
}

void ExpertLoadRecorder::Record(int layer, const int32_t* logical_ids, const int32_t* physical_ids, int64_t count) {
  DS_CHECK(layer >= 0 && layer < num_layers()) << "ExpertLoadRecorder: layer " << layer << " of " << num_layers();
  std::vector<int64_t>& lc = logical_[layer];
  std::vector<int64_t>& pc = physical_[layer];
  for (int64_t i = 0; i < count; ++i) {
    const int32_t e = logical_ids[i], s = physical_ids[i];
    DS_CHECK(e >= 0 && e < num_logical_) << "ExpertLoadRecorder: logical expert " << e << " of " << num_logical_;
    DS_CHECK(s >= 0 && s < num_physical_) << "ExpertLoadRecorder: physical slot " << s << " of " << num_physical_;
    ++lc[e];
    ++pc[s];
  }
}

void ExpertLoadRecorder::Reset() {
  num_forwards_ = 0;
  for (auto& r : logical_) std::fill(r.begin(), r.end(), 0);
  for (auto& r : physical_) std::fill(r.begin(), r.end(), 0);
}

}  // namespace ds
