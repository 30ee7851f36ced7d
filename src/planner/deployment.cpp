#include "planner/deployment.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds::planner {
namespace {
using json = nlohmann::json;

Status Err(const std::string& where, const std::string& what) {
  return InvalidArgument("deployment: " + where + ": " + what);
}

Status GetIntField(const json& j, const std::string& where, const char* key, int* out, int min_value) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) return Err(where + "." + key, "must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < min_value || v > 1000000) return Err(where + "." + key, "out of range: " + it->dump());
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status GetNumField(const json& j, const std::string& where, const char* key, double* out, double lo, double hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return Err(where + "." + key, "must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) return Err(where + "." + key, "out of range: " + it->dump());
  *out = v;
  return Status::Ok();
}

StatusOr<InstanceLayout> ParseLayout(const json& j, Role role) {
  const std::string where = RoleName(role);
  if (!j.is_object()) return Err(where, "must be an object");
  static const char* kKnown[] = {"devices", "attention_tp", "pp", "shared_expert_devices",
                                 "redundant_experts", "moe_comm", "micro_batch_overlap", "dense_tp",
                                 "lm_head_tp", "concurrency_per_device", "batch_prompts",
                                 "expert_imbalance", "comment", "dp", "ep"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known |= it.key() == k;
    if (!known) return Err(where + "." + it.key(), "unknown field");
  }
  InstanceLayout l;
  l.role = role;
  DS_RETURN_IF_ERROR(GetIntField(j, where, "devices", &l.devices, 1));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "attention_tp", &l.attention_tp, 1));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "pp", &l.pp, 1));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "shared_expert_devices", &l.shared_expert_devices, 0));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "redundant_experts", &l.redundant_experts, 0));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "dense_tp", &l.dense_tp, 0));
  DS_RETURN_IF_ERROR(GetIntField(j, where, "lm_head_tp", &l.lm_head_tp, 0));
  DS_RETURN_IF_ERROR(GetNumField(j, where, "expert_imbalance", &l.expert_imbalance, 0, 16));
  const char* batch_key = role == Role::kDecode ? "concurrency_per_device" : "batch_prompts";
  DS_RETURN_IF_ERROR(GetNumField(j, where, batch_key, &l.batch, 0, 1e6));
  if (j.contains("moe_comm")) {
    if (!j["moe_comm"].is_string()) return Err(where + ".moe_comm", "must be a string");
    const std::string s = j["moe_comm"].get<std::string>();
    if (s == "all_to_all") l.moe_comm = MoeComm::kAllToAll;
    else if (s == "allgather_reducescatter") l.moe_comm = MoeComm::kAllGatherReduceScatter;
    else return Err(where + ".moe_comm", "'" + s + "' is not all_to_all or allgather_reducescatter");
  }
  if (j.contains("micro_batch_overlap")) {
    if (!j["micro_batch_overlap"].is_boolean()) return Err(where + ".micro_batch_overlap", "must be true or false");
    l.micro_batch_overlap = j["micro_batch_overlap"].get<bool>();
  }
  if (l.devices % l.pp != 0) return Err(where, "devices must be a multiple of pp");
  if (l.stage_devices() % l.attention_tp != 0) return Err(where, "devices/pp must be a multiple of attention_tp");
  if (l.shared_expert_devices >= l.stage_devices()) return Err(where, "shared_expert_devices must leave routed-expert devices");
  // Optional consistency checks for the derived degrees.
  int v = 0;
  DS_RETURN_IF_ERROR(GetIntField(j, where, "dp", &v, 0));
  if (v && v != l.dp()) return Err(where + ".dp", "must equal devices/pp/attention_tp = " + std::to_string(l.dp()));
  v = 0;
  DS_RETURN_IF_ERROR(GetIntField(j, where, "ep", &v, 0));
  if (v && v != l.ep()) return Err(where + ".ep", "must equal devices/pp - shared_expert_devices = " + std::to_string(l.ep()));
  return l;
}
}  // namespace

const char* MoeCommName(MoeComm c) {
  return c == MoeComm::kAllToAll ? "all_to_all" : "allgather_reducescatter";
}
const char* RoleName(Role r) { return r == Role::kPrefill ? "prefill" : "decode"; }

std::string InstanceLayout::Summary() const {
  std::ostringstream os;
  os << devices << " dev: ";
  if (pp > 1) os << "PP" << pp << " x ";
  os << "attn DP" << dp();
  if (attention_tp > 1) os << "xTP" << attention_tp;
  os << ", MoE EP" << ep();
  if (shared_expert_devices) os << "+" << shared_expert_devices << " shared";
  if (redundant_experts) os << " (+" << redundant_experts << " redundant)";
  os << " " << (moe_comm == MoeComm::kAllToAll ? "A2A" : "AG/RS") << ", MBO " << (micro_batch_overlap ? "on" : "off");
  return os.str();
}

StatusOr<Deployment> ParseDeployment(const json& j, WType default_weight) {
  if (!j.is_object()) return InvalidArgument("deployment: top level must be an object");
  Deployment d;
  d.weight_dtype = default_weight;
  if (j.contains("name") && j["name"].is_string()) d.name = j["name"].get<std::string>();
  if (j.contains("weight_dtype")) {
    if (!j["weight_dtype"].is_string()) return Err("weight_dtype", "must be a string");
    DS_ASSIGN_OR_RETURN(d.weight_dtype, ParseWType(j["weight_dtype"].get<std::string>()));
  }
  if (j.contains("kv_dtype")) {
    if (!j["kv_dtype"].is_string()) return Err("kv_dtype", "must be a string");
    DS_ASSIGN_OR_RETURN(d.kv_dtype, ParseWType(j["kv_dtype"].get<std::string>()));
  }
  if (j.contains("mtp")) {
    const json& m = j["mtp"];
    if (!m.is_object()) return Err("mtp", "must be an object {layers, acceptance}");
    DS_RETURN_IF_ERROR(GetIntField(m, "mtp", "layers", &d.mtp_layers, 0));
    DS_RETURN_IF_ERROR(GetNumField(m, "mtp", "acceptance", &d.mtp_acceptance, 0, 1));
    if (d.mtp_layers > 4) return Err("mtp.layers", "at most 4 draft tokens are modelled");
  }
  if (j.contains("prefill")) { DS_ASSIGN_OR_RETURN(d.prefill, ParseLayout(j["prefill"], Role::kPrefill)); }
  if (j.contains("decode")) { DS_ASSIGN_OR_RETURN(d.decode, ParseLayout(j["decode"], Role::kDecode)); }
  if (!d.prefill && !d.decode) return InvalidArgument("deployment: needs a 'prefill' or a 'decode' instance");
  if (j.contains("instances")) {
    const json& in = j["instances"];
    if (!in.is_object()) return Err("instances", "must be an object {prefill, decode}");
    DS_RETURN_IF_ERROR(GetIntField(in, "instances", "prefill", &d.prefill_instances, 0));
    DS_RETURN_IF_ERROR(GetIntField(in, "instances", "decode", &d.decode_instances, 0));
  }
  return d;
}

StatusOr<Deployment> LoadDeployment(const std::string& path, WType default_weight) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open deployment file " + path);
  json j = json::parse(in, nullptr, false, true);
  if (j.is_discarded()) return InvalidArgument(path + ": invalid JSON");
  auto d = ParseDeployment(j, default_weight);
  if (!d.ok()) return InvalidArgument(path + ": " + d.status().message());
  return d;
}

json LayoutToJson(const InstanceLayout& l) {
  json j{{"devices", l.devices},
         {"attention_tp", l.attention_tp},
         {"dp", l.dp()},
         {"ep", l.ep()},
         {"pp", l.pp},
         {"shared_expert_devices", l.shared_expert_devices},
         {"redundant_experts", l.redundant_experts},
         {"moe_comm", MoeCommName(l.moe_comm)},
         {"micro_batch_overlap", l.micro_batch_overlap},
         {"dense_tp", l.dense_tp},
         {"lm_head_tp", l.lm_head_tp}};
  if (l.role == Role::kDecode) j["concurrency_per_device"] = l.batch;
  else j["batch_prompts"] = l.batch;
  if (l.expert_imbalance > 0) j["expert_imbalance"] = l.expert_imbalance;
  return j;
}

json DeploymentToJson(const Deployment& d) {
  json j{{"name", d.name},
         {"weight_dtype", WTypeName(d.weight_dtype)},
         {"kv_dtype", WTypeName(d.kv_dtype)},
         {"mtp", {{"layers", d.mtp_layers}, {"acceptance", d.mtp_acceptance}}},
         {"instances", {{"prefill", d.prefill_instances}, {"decode", d.decode_instances}}}};
  if (d.prefill) j["prefill"] = LayoutToJson(*d.prefill);
  if (d.decode) j["decode"] = LayoutToJson(*d.decode);
  return j;
}

}  // namespace ds::planner
