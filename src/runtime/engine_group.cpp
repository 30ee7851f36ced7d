#include "runtime/engine_group.h"

#include <algorithm>

#include "common/check.h"

namespace ds {

EngineGroup::EngineGroup(std::vector<Engine*> engines, std::unique_ptr<DpPolicy> policy)
    : engines_(std::move(engines)), policy_(std::move(policy)) {
  DS_CHECK(!engines_.empty()) << "EngineGroup needs at least one engine";
  DS_CHECK(engines_.size() == 1 || policy_) << "EngineGroup with several ranks needs a DP policy";
}

Status EngineGroup::Add(EngineRequest req) {
  int r = 0;
  if (engines_.size() > 1) {
    std::vector<DpRankLoad> loads(engines_.size());
    for (size_t i = 0; i < engines_.size(); ++i) {
      loads[i].requests = engines_[i]->num_in_flight();
      loads[i].context_tokens = engines_[i]->context_tokens_in_flight();
      loads[i].accepting = !engines_[i]->admission_stopped();
    }
    r = policy_->Choose(loads, {static_cast<int64_t>(req.prompt.size()), req.params.max_tokens});
    if (r < 0) return ResourceExhausted("server is shutting down (no data-parallel rank accepts requests)");
  }
  const uint64_t id = req.id;
  // Forget the rank once the request's final output has been delivered.
  OutputCallback user = std::move(req.on_output);
  req.on_output = [this, id, user = std::move(user)](EngineOutput&& o) {
    const bool done = o.finished;
    if (user) user(std::move(o));
    if (done) {
      std::lock_guard<std::mutex> lock(mu_);
      rank_of_.erase(id);
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    rank_of_[id] = r;
  }
  Status st = engines_[r]->Add(std::move(req));
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    rank_of_.erase(id);
  }
  return st;
}

void EngineGroup::Abort(uint64_t request_id) {
  const int r = RankOf(request_id);
  if (r >= 0) engines_[r]->Abort(request_id);
}

int EngineGroup::RankOf(uint64_t request_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rank_of_.find(request_id);
  return it == rank_of_.end() ? -1 : it->second;
}

void EngineGroup::StopAdmission() {
  for (Engine* e : engines_) e->StopAdmission();
}

bool EngineGroup::admission_stopped() const {
  return std::all_of(engines_.begin(), engines_.end(), [](const Engine* e) { return e->admission_stopped(); });
}

int EngineGroup::num_in_flight() const {
  int n = 0;
  for (const Engine* e : engines_) n += e->num_in_flight();
  return n;
}

int EngineGroup::max_model_len() const {
  int m = engines_[0]->max_model_len();
  for (const Engine* e : engines_) m = std::min(m, e->max_model_len());
  return m;
}

EngineStats EngineGroup::Stats() const {
  EngineStats total;
  for (const Engine* e : engines_) total.Add(e->Stats());
  return total;
}

void EngineGroup::RenderHistogram(HistogramOf which, const std::string& name, const std::string& help,
                                  const std::string& labels, std::string* out) const {
  if (engines_.size() == 1) {
    (engines_[0]->*which)().Render(name, help, labels, out);
    return;
  }
  Histogram sum(LatencyBuckets());
  for (const Engine* e : engines_) (e->*which)().AddTo(&sum);
  sum.Render(name, help, labels, out);
}

}  // namespace ds
