#include "parallel/eplb.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace ds {

const char* EplbPolicyName(EplbPolicy p) {
  switch (p) {
    case EplbPolicy::kAuto: return "auto";
    case EplbPolicy::kHierarchical: return "hierarchical";
    case EplbPolicy::kGlobal: return "global";
  }
  return "?";
}

StatusOr<EplbPolicy> ParseEplbPolicy(const std::string& s) {
  if (s == "auto") return EplbPolicy::kAuto;
  if (s == "hierarchical") return EplbPolicy::kHierarchical;
  if (s == "global") return EplbPolicy::kGlobal;
  return InvalidArgument("unknown EPLB policy '" + s + "' (auto | hierarchical | global)");
}

namespace {

// Greedy balanced packing of items (weight[i]) into num_packs packs of exactly
// items/num_packs each: heaviest first, each to the lightest pack with room (lowest index on
// ties; std::stable_sort keeps equal weights in ascending item order). With one item a pack,
// item i goes to pack i (nothing to balance; keeps the placement stable).
// pack[i], rank[i]: the pack of item i and its position in that pack.
void BalancedPacking(const std::vector<double>& weight, int num_packs, std::vector<int>* pack,
                     std::vector<int>* rank) {
  const int n = static_cast<int>(weight.size());
  DS_CHECK(num_packs > 0 && n % num_packs == 0) << "BalancedPacking: " << n << " items, " << num_packs << " packs";
  const int per_pack = n / num_packs;
  pack->assign(n, -1);
  rank->assign(n, -1);
  if (per_pack == 1) {
    std::iota(pack->begin(), pack->end(), 0);
    std::fill(rank->begin(), rank->end(), 0);
    return;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return weight[a] > weight[b]; });
  std::vector<double> pack_weight(num_packs, 0.0);
  std::vector<int> pack_items(num_packs, 0);
  for (int item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p)
      if (pack_items[p] < per_pack && (best < 0 || pack_weight[p] < pack_weight[best])) best = p;
    (*pack)[item] = best;
    (*rank)[item] = pack_items[best]++;
    pack_weight[best] += weight[item];
  }
}

// Replicates n logical experts (weight[e]) into num_phy >= n physical replicas: replica e < n
// is expert e; each further replica goes to the expert with the largest weight per replica
// (lowest id on ties). phy2log: [num_phy]; count: [n] replicas per expert.
void ReplicateExperts(const std::vector<double>& weight, int num_phy, std::vector<int>* phy2log,
                      std::vector<int>* count) {
  const int n = static_cast<int>(weight.size());
  DS_CHECK(num_phy >= n) << "ReplicateExperts: " << num_phy << " replicas for " << n << " experts";
  phy2log->resize(num_phy);
  std::iota(phy2log->begin(), phy2log->begin() + n, 0);
  count->assign(n, 1);
  for (int p = n; p < num_phy; ++p) {
    int best = 0;
    for (int e = 1; e < n; ++e)
      if (weight[e] / (*count)[e] > weight[best] / (*count)[best]) best = e;
    (*phy2log)[p] = best;
    ++(*count)[best];
  }
}

// One layer, the hierarchical algorithm (global = one group, one node). Returns
// physical_to_logical [num_physical] and fills count [num_logical].
std::vector<int32_t> RebalanceLayer(const std::vector<double>& load, int num_physical, int num_groups, int num_nodes,
                                    int num_gpus, std::vector<int32_t>* count) {
  const int E = static_cast<int>(load.size());
  const int group_size = E / num_groups, groups_per_node = num_groups / num_nodes;
  const int gpus_per_node = num_gpus / num_nodes, slots_per_gpu = num_physical / num_gpus;
  const int log_per_node = E / num_nodes, phy_per_node = num_physical / num_nodes;

  // Step 1: expert groups -> nodes. node_log[n * log_per_node + j]: the j-th logical expert
  // placed on node n (groups in pack order, experts of a group contiguous).
  std::vector<double> group_load(num_groups, 0.0);
  for (int g = 0; g < num_groups; ++g)
    for (int i = 0; i < group_size; ++i) group_load[g] += load[g * group_size + i];
  std::vector<int> group_node, group_rank;
  BalancedPacking(group_load, num_nodes, &group_node, &group_rank);
  std::vector<int> node_log(E);
  for (int g = 0; g < num_groups; ++g)
    for (int i = 0; i < group_size; ++i)
      node_log[(group_node[g] * groups_per_node + group_rank[g]) * group_size + i] = g * group_size + i;

  std::vector<int32_t> p2l(num_physical, -1);
  count->assign(E, 0);
  for (int node = 0; node < num_nodes; ++node) {
    // Step 2: redundant replicas inside the node. w: [log_per_node] loads of the node's experts.
    std::vector<double> w(log_per_node);
    for (int j = 0; j < log_per_node; ++j) w[j] = load[node_log[node * log_per_node + j]];
    std::vector<int> phy2j, cnt;
    ReplicateExperts(w, phy_per_node, &phy2j, &cnt);
    // Step 3: the node's replicas -> its GPUs. replica_load: [phy_per_node]
    std::vector<double> replica_load(phy_per_node);
    for (int p = 0; p < phy_per_node; ++p) replica_load[p] = w[phy2j[p]] / cnt[phy2j[p]];
    std::vector<int> gpu, rank;
    BalancedPacking(replica_load, gpus_per_node, &gpu, &rank);
    for (int p = 0; p < phy_per_node; ++p) {
      const int slot = node * phy_per_node + gpu[p] * slots_per_gpu + rank[p];
      const int e = node_log[node * log_per_node + phy2j[p]];
      p2l[slot] = e;
      ++(*count)[e];
    }
  }
  return p2l;
}

}  // namespace

StatusOr<EplbResult> RebalanceExperts(const std::vector<std::vector<double>>& load, const EplbOptions& o) {
  constexpr int kMaxPhysical = 1 << 20;  // a sanity bound on the CLI input, far above any deployment
  if (load.empty()) return InvalidArgument("eplb: the load has no layers");
  const int E = static_cast<int>(load[0].size());
  if (E <= 0) return InvalidArgument("eplb: the load has no experts (layer 0 is empty)");
  for (size_t l = 0; l < load.size(); ++l) {
    if (static_cast<int>(load[l].size()) != E)
      return InvalidArgument("eplb: layer " + std::to_string(l) + " has " + std::to_string(load[l].size()) +
                             " experts, layer 0 has " + std::to_string(E));
    for (int e = 0; e < E; ++e)
      if (!std::isfinite(load[l][e]) || load[l][e] < 0)
        return InvalidArgument("eplb: layer " + std::to_string(l) + " expert " + std::to_string(e) +
                               " has load " + std::to_string(load[l][e]) + " (must be finite and >= 0)");
  }
  if (o.num_gpus <= 0) return InvalidArgument("eplb: num_gpus must be > 0, got " + std::to_string(o.num_gpus));
  if (o.num_nodes <= 0) return InvalidArgument("eplb: num_nodes must be > 0, got " + std::to_string(o.num_nodes));
  if (o.num_groups <= 0) return InvalidArgument("eplb: num_groups must be > 0, got " + std::to_string(o.num_groups));
  if (o.num_gpus % o.num_nodes != 0)
    return InvalidArgument("eplb: num_gpus (" + std::to_string(o.num_gpus) + ") must be a multiple of num_nodes (" +
                           std::to_string(o.num_nodes) + ")");
  if (o.num_physical < E)
    return InvalidArgument("eplb: num_physical (" + std::to_string(o.num_physical) +
                           ") must be >= the number of logical experts (" + std::to_string(E) + ")");
  if (o.num_physical > kMaxPhysical)
    return InvalidArgument("eplb: num_physical (" + std::to_string(o.num_physical) + ") is above the limit of " +
                           std::to_string(kMaxPhysical) + " slots a layer");
  if (o.num_physical % o.num_gpus != 0)
    return InvalidArgument("eplb: num_physical (" + std::to_string(o.num_physical) + ") must be a multiple of num_gpus (" +
                           std::to_string(o.num_gpus) + ")");
  if (E % o.num_groups != 0)
    return InvalidArgument("eplb: num_groups (" + std::to_string(o.num_groups) + ") must divide the " +
                           std::to_string(E) + " logical experts");
  EplbPolicy policy = o.policy;
  if (policy == EplbPolicy::kAuto)
    policy = o.num_groups % o.num_nodes == 0 ? EplbPolicy::kHierarchical : EplbPolicy::kGlobal;
  if (policy == EplbPolicy::kHierarchical && o.num_groups % o.num_nodes != 0)
    return InvalidArgument("eplb: the hierarchical policy needs num_groups (" + std::to_string(o.num_groups) +
                           ") to be a multiple of num_nodes (" + std::to_string(o.num_nodes) + "); use global");

  EplbResult r;
  r.policy = policy;
  const bool hier = policy == EplbPolicy::kHierarchical;
  const int groups = hier ? o.num_groups : 1, nodes = hier ? o.num_nodes : 1;
  r.physical_to_logical.resize(load.size());
  r.replica_count.resize(load.size());
  for (size_t l = 0; l < load.size(); ++l)
    r.physical_to_logical[l] = RebalanceLayer(load[l], o.num_physical, groups, nodes, o.num_gpus, &r.replica_count[l]);
  return r;
}

std::vector<double> GpuLoads(const std::vector<double>& load, const std::vector<int32_t>& p2l, int num_gpus) {
  DS_CHECK(num_gpus > 0 && !p2l.empty() && p2l.size() % num_gpus == 0)
      << "GpuLoads: " << p2l.size() << " slots on " << num_gpus << " GPUs";
  std::vector<int> cnt(load.size(), 0);
  for (int32_t e : p2l) {
    DS_CHECK(e >= 0 && e < static_cast<int32_t>(load.size())) << "GpuLoads: expert " << e;
    ++cnt[e];
  }
  const size_t per_gpu = p2l.size() / num_gpus;
  std::vector<double> g(num_gpus, 0.0);
  for (size_t s = 0; s < p2l.size(); ++s) g[s / per_gpu] += load[p2l[s]] / cnt[p2l[s]];
  return g;
}

namespace {

Status ParseLayers(const nlohmann::json& x, const std::string& where, std::vector<std::vector<double>>* out) {
  if (!x.is_array() || x.empty()) return InvalidArgument("expert load: " + where + " must be a non-empty [layers][experts] array");
  out->clear();
  for (size_t l = 0; l < x.size(); ++l) {
    if (!x[l].is_array())
      return InvalidArgument("expert load: " + where + " layer " + std::to_string(l) + " is not an array");
    std::vector<double> row;
    for (size_t e = 0; e < x[l].size(); ++e) {
      const auto& v = x[l][e];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return InvalidArgument("expert load: " + where + " layer " + std::to_string(l) + " expert " +
                               std::to_string(e) + " is not a count >= 0: " + v.dump());
      row.push_back(v.get<double>());
    }
    out->push_back(std::move(row));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<std::vector<double>>> ParseExpertLoadJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("expert load: not valid JSON");
  if (j.is_object()) {
    auto it = j.find("logical_count");
    if (it == j.end()) return InvalidArgument("expert load: object without 'logical_count'");
    j = *it;
  }
  if (!j.is_array() || j.empty()) return InvalidArgument("expert load: expected a non-empty array");
  std::vector<std::vector<double>> total;
  const bool steps = j[0].is_array() && !j[0].empty() && j[0][0].is_array();
  if (!steps) {
    DS_RETURN_IF_ERROR(ParseLayers(j, "logical_count", &total));
    return total;
  }
  for (size_t s = 0; s < j.size(); ++s) {
    std::vector<std::vector<double>> one;
    DS_RETURN_IF_ERROR(ParseLayers(j[s], "step " + std::to_string(s), &one));
    if (s == 0) {
      total = std::move(one);
      continue;
    }
    if (one.size() != total.size())
      return InvalidArgument("expert load: step " + std::to_string(s) + " has " + std::to_string(one.size()) +
                             " layers, step 0 has " + std::to_string(total.size()));
    for (size_t l = 0; l < one.size(); ++l) {
      if (one[l].size() != total[l].size())
        return InvalidArgument("expert load: step " + std::to_string(s) + " layer " + std::to_string(l) + " has " +
                               std::to_string(one[l].size()) + " experts, step 0 has " +
                               std::to_string(total[l].size()));
      for (size_t e = 0; e < one[l].size(); ++e) total[l][e] += one[l][e];
    }
  }
  return total;
}

double Balancedness(const std::vector<double>& gpu_loads) {
  if (gpu_loads.empty()) return 1.0;
  const double mx = *std::max_element(gpu_loads.begin(), gpu_loads.end());
  if (mx <= 0) return 1.0;
  const double mean = std::accumulate(gpu_loads.begin(), gpu_loads.end(), 0.0) / gpu_loads.size();
  return mean / mx;
}

}  // namespace ds
