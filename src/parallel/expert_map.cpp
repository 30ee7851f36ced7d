#include "parallel/expert_map.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace ds {

using json = nlohmann::json;

ExpertMap ExpertMap::Trivial(int num_layers, int num_logical, int num_physical) {
  DS_CHECK(num_layers >= 0 && num_logical > 0 && num_physical >= num_logical)
      << "ExpertMap::Trivial: layers " << num_layers << ", logical " << num_logical << ", physical " << num_physical;
  std::vector<std::vector<int32_t>> p2l(num_layers, std::vector<int32_t>(num_physical));
  for (auto& row : p2l)
    for (int s = 0; s < num_physical; ++s) row[s] = s % num_logical;
  auto m = FromPhysicalToLogical(std::move(p2l), num_logical);
  DS_CHECK(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

StatusOr<ExpertMap> ExpertMap::FromPhysicalToLogical(std::vector<std::vector<int32_t>> p2l, int num_logical) {
  if (num_logical <= 0)
    return InvalidArgument("expert map: num_logical_experts must be > 0, got " + std::to_string(num_logical));
  if (p2l.empty()) return InvalidArgument("expert map: no layers");
  const size_t num_physical = p2l[0].size();
  ExpertMap m;
  m.num_logical_ = num_logical;
  m.num_physical_ = static_cast<int>(num_physical);
  m.l2p_.resize(p2l.size());
  for (size_t l = 0; l < p2l.size(); ++l) {
    const auto& row = p2l[l];
    if (row.size() != num_physical)
      return InvalidArgument("expert map: layer " + std::to_string(l) + " has " + std::to_string(row.size()) +
                             " physical slots, layer 0 has " + std::to_string(num_physical) +
                             " (every layer needs the same count)");
    if (row.size() < static_cast<size_t>(num_logical))
      return InvalidArgument("expert map: layer " + std::to_string(l) + " has " + std::to_string(row.size()) +
                             " physical slots, fewer than the " + std::to_string(num_logical) + " logical experts");
    auto& l2p = m.l2p_[l];
    l2p.assign(num_logical, {});
    for (size_t s = 0; s < row.size(); ++s) {
      if (row[s] < 0 || row[s] >= num_logical)
        return InvalidArgument("expert map: layer " + std::to_string(l) + " slot " + std::to_string(s) +
                               " holds logical expert " + std::to_string(row[s]) + ", outside [0, " +
                               std::to_string(num_logical) + ")");
      l2p[row[s]].push_back(static_cast<int32_t>(s));
    }
    for (int e = 0; e < num_logical; ++e)
      if (l2p[e].empty())
        return InvalidArgument("expert map: layer " + std::to_string(l) + ": logical expert " + std::to_string(e) +
                               " has no physical slot (every expert needs >= 1 replica)");
  }
  m.p2l_ = std::move(p2l);
  return m;
}

bool ExpertMap::is_identity() const {
  if (num_physical_ != num_logical_) return false;
  for (const auto& row : p2l_)
    for (int s = 0; s < num_physical_; ++s)
      if (row[s] != s) return false;
  return true;
}

Status ExpertMap::CheckFits(int num_layers, int num_logical) const {
  if (this->num_layers() != num_layers)
    return InvalidArgument("expert map has " + std::to_string(this->num_layers()) + " layers, the model has " +
                           std::to_string(num_layers));
  if (num_logical_ != num_logical)
    return InvalidArgument("expert map has " + std::to_string(num_logical_) + " logical experts, the model has " +
                           std::to_string(num_logical) + " routed experts");
  return Status::Ok();
}

StatusOr<ExpertMap> ExpertMap::FromJson(const std::string& text, int expected_num_logical) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("expert map: not valid JSON");
  if (!j.is_object()) return InvalidArgument("expert map: top level must be an object");
  int num_logical = expected_num_logical;
  if (auto it = j.find("num_logical_experts"); it != j.end()) {
    if (!it->is_number_integer()) return InvalidArgument("expert map: 'num_logical_experts' must be an integer");
    const int v = it->get<int>();
    if (expected_num_logical >= 0 && v != expected_num_logical)
      return InvalidArgument("expert map: 'num_logical_experts' is " + std::to_string(v) + ", expected " +
                             std::to_string(expected_num_logical));
    num_logical = v;
  }
  if (num_logical < 0)
    return InvalidArgument("expert map: 'num_logical_experts' is missing (and no expected count was given)");
  auto it = j.find("physical_to_logical_map");
  if (it == j.end()) return InvalidArgument("expert map: missing 'physical_to_logical_map'");
  if (!it->is_array()) return InvalidArgument("expert map: 'physical_to_logical_map' must be [layers][slots]");
  std::vector<std::vector<int32_t>> p2l;
  for (size_t l = 0; l < it->size(); ++l) {
    const json& row = (*it)[l];
    if (!row.is_array())
      return InvalidArgument("expert map: 'physical_to_logical_map' layer " + std::to_string(l) + " is not an array");
    std::vector<int32_t> r;
    for (size_t s = 0; s < row.size(); ++s) {
      if (!row[s].is_number_integer())
        return InvalidArgument("expert map: layer " + std::to_string(l) + " slot " + std::to_string(s) +
                               " is not an integer: " + row[s].dump());
      const int64_t v = row[s].get<int64_t>();
      if (v < INT32_MIN || v > INT32_MAX)
        return InvalidArgument("expert map: layer " + std::to_string(l) + " slot " + std::to_string(s) +
                               " is out of range: " + std::to_string(v));
      r.push_back(static_cast<int32_t>(v));
    }
    p2l.push_back(std::move(r));
  }
  DS_ASSIGN_OR_RETURN(ExpertMap m, FromPhysicalToLogical(std::move(p2l), num_logical));
  if (auto np = j.find("num_physical_experts"); np != j.end()) {
    if (!np->is_number_integer() || np->get<int64_t>() != m.num_physical())
      return InvalidArgument("expert map: 'num_physical_experts' is " + np->dump() + " but the rows have " +
                             std::to_string(m.num_physical()) + " slots");
  }
  return m;
}

StatusOr<ExpertMap> ExpertMap::LoadFile(const std::string& path, int expected_num_logical) {
  std::ifstream f(path);
  if (!f) return NotFound("expert map: cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  auto m = FromJson(ss.str(), expected_num_logical);
  if (!m.ok()) return Status(m.status().code(), path + ": " + m.status().message());
  return m;
}

std::string ExpertMap::ToJson() const {
  json j;
  j["num_logical_experts"] = num_logical_;
  j["num_physical_experts"] = num_physical_;
  j["physical_to_logical_map"] = p2l_;
  return j.dump() + "\n";
}

Status ExpertMap::SaveFile(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return NotFound("expert map: cannot write '" + path + "'");
  f << ToJson();
  if (!f) return Internal("expert map: write to '" + path + "' failed");
  return Status::Ok();
}

}  // namespace ds
