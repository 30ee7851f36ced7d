#include "planner/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace ds::planner {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

Status Num(const json& j, const char* key, double* out, bool required, double min_value = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(std::string("hardware profile: field '") + key + "' is required");
    return Status::Ok();
  }
  if (!it->is_number())
    return InvalidArgument(std::string("hardware profile: field '") + key + "' must be a number");
  *out = it->get<double>();
  if (!(*out >= min_value))
    return InvalidArgument(std::string("hardware profile: field '") + key + "' must be >= " +
                           std::to_string(min_value));
  return Status::Ok();
}

std::string Lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

double HardwareProfile::PeakTflops(WType t) const {
  double v = t == WType::kFP8 ? tflops_fp8 : t == WType::kINT8 ? tflops_int8 : tflops_bf16;
  return v > 0 ? v : tflops_bf16;
}
bool HardwareProfile::Supports(WType t) const {
  return (t == WType::kFP8 ? tflops_fp8 : t == WType::kINT8 ? tflops_int8 : tflops_bf16) > 0;
}

StatusOr<HardwareProfile> ParseHardwareProfile(const json& j) {
  if (!j.is_object()) return InvalidArgument("hardware profile: top level must be an object");
  HardwareProfile h;
  if (!j.contains("name") || !j["name"].is_string())
    return InvalidArgument("hardware profile: field 'name' (string) is required");
  h.name = j["name"].get<std::string>();
  if (j.contains("description") && j["description"].is_string()) h.description = j["description"].get<std::string>();
  double v = 0;
  DS_RETURN_IF_ERROR(Num(j, "devices_per_node", &v, true, 1));
  h.devices_per_node = static_cast<int>(v);
  v = h.devices_per_node;
  DS_RETURN_IF_ERROR(Num(j, "scale_up_devices", &v, false, 1));
  h.scale_up_devices = std::max(static_cast<int>(v), h.devices_per_node);
  DS_RETURN_IF_ERROR(Num(j, "hbm_gb", &h.hbm_gb, true, 1));
  DS_RETURN_IF_ERROR(Num(j, "hbm_bw_gbs", &h.hbm_bw_gbs, true, 1));
  DS_RETURN_IF_ERROR(Num(j, "reserved_gb", &h.reserved_gb, false, 0));
  if (!j.contains("tflops") || !j["tflops"].is_object())
    return InvalidArgument("hardware profile: field 'tflops' {bf16, fp8, int8} is required");
  DS_RETURN_IF_ERROR(Num(j["tflops"], "bf16", &h.tflops_bf16, true, 1));
  DS_RETURN_IF_ERROR(Num(j["tflops"], "fp8", &h.tflops_fp8, false, 0));
  DS_RETURN_IF_ERROR(Num(j["tflops"], "int8", &h.tflops_int8, false, 0));
  for (const char* k : {"intra_node", "inter_node"}) {
    if (!j.contains(k) || !j[k].is_object())
      return InvalidArgument(std::string("hardware profile: field '") + k + "' {bw_gbs, latency_us} is required");
  }
  DS_RETURN_IF_ERROR(Num(j["intra_node"], "bw_gbs", &h.intra_bw_gbs, true, 0.001));
  DS_RETURN_IF_ERROR(Num(j["intra_node"], "latency_us", &h.intra_latency_us, false, 0));
  DS_RETURN_IF_ERROR(Num(j["inter_node"], "bw_gbs", &h.inter_bw_gbs, true, 0.001));
  DS_RETURN_IF_ERROR(Num(j["inter_node"], "latency_us", &h.inter_latency_us, false, 0));
  if (j.contains("default_weight_dtype")) {
    if (!j["default_weight_dtype"].is_string())
      return InvalidArgument("hardware profile: field 'default_weight_dtype' must be a string");
    DS_ASSIGN_OR_RETURN(h.default_weight_dtype, ParseWType(j["default_weight_dtype"].get<std::string>()));
  }
  if (!j.contains("efficiency") || !j["efficiency"].is_object())
    return InvalidArgument("hardware profile: field 'efficiency' is required (explicit factors)");
  const json& e = j["efficiency"];
  DS_RETURN_IF_ERROR(Num(e, "gemm_mfu", &h.eff.gemm_mfu, true, 0.01));
  DS_RETURN_IF_ERROR(Num(e, "mla_attention", &h.eff.mla_attention, true, 0.01));
  DS_RETURN_IF_ERROR(Num(e, "bandwidth", &h.eff.bandwidth, true, 0.01));
  DS_RETURN_IF_ERROR(Num(e, "comm", &h.eff.comm, true, 0.01));
  DS_RETURN_IF_ERROR(Num(e, "overlap", &h.eff.overlap, true, 0));
  DS_RETURN_IF_ERROR(Num(e, "layer_overhead_us", &h.eff.layer_overhead_us, true, 0));
  DS_RETURN_IF_ERROR(Num(e, "step_overhead_us", &h.eff.step_overhead_us, true, 0));
  for (double f : {h.eff.gemm_mfu, h.eff.mla_attention, h.eff.bandwidth, h.eff.comm, h.eff.overlap})
    if (f > 1.0) return InvalidArgument("hardware profile '" + h.name + "': efficiency factors must be <= 1");
  if (j.contains("efficiency_source") && j["efficiency_source"].is_string())
    h.efficiency_source = j["efficiency_source"].get<std::string>();
  return h;
}

json HardwareProfileToJson(const HardwareProfile& h) {
  return json{{"name", h.name},
              {"devices_per_node", h.devices_per_node},
              {"scale_up_devices", h.scale_up_devices},
              {"hbm_gb", h.hbm_gb},
              {"hbm_bw_gbs", h.hbm_bw_gbs},
              {"tflops", {{"bf16", h.tflops_bf16}, {"fp8", h.tflops_fp8}, {"int8", h.tflops_int8}}},
              {"intra_node", {{"bw_gbs", h.intra_bw_gbs}, {"latency_us", h.intra_latency_us}}},
              {"inter_node", {{"bw_gbs", h.inter_bw_gbs}, {"latency_us", h.inter_latency_us}}},
              {"efficiency",
               {{"gemm_mfu", h.eff.gemm_mfu},
                {"mla_attention", h.eff.mla_attention},
                {"bandwidth", h.eff.bandwidth},
                {"comm", h.eff.comm},
                {"overlap", h.eff.overlap},
                {"layer_overhead_us", h.eff.layer_overhead_us},
                {"step_overhead_us", h.eff.step_overhead_us}}}};
}

std::string FindDataDir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DSINFER_DATA_DIR")) candidates.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / "data");
    candidates.push_back(exe.parent_path() / ".." / ".." / "data");
    candidates.push_back(exe.parent_path() / ".." / "share" / "dsinfer" / "data");
  }
#ifdef DS_SOURCE_DIR
  candidates.push_back(fs::path(DS_SOURCE_DIR) / "data");
#endif
  for (const auto& c : candidates)
    if (fs::is_directory(c / "hardware", ec)) return fs::weakly_canonical(c, ec).string();
  return "";
}

std::vector<std::string> ListHardwareProfiles() {
  std::vector<std::string> out;
  std::string dir = FindDataDir();
  if (dir.empty()) return out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "hardware", ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path) {
  fs::path path;
  std::error_code ec;
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  if (is_path) {
    path = name_or_path;
  } else {
    std::string dir = FindDataDir();
    if (dir.empty())
      return NotFound("hardware profile '" + name_or_path +
                      "': no data directory found (set DSINFER_DATA_DIR or pass a file path)");
    for (const auto& e : fs::directory_iterator(fs::path(dir) / "hardware", ec))
      if (e.path().extension() == ".json" && Lower(e.path().stem().string()) == Lower(name_or_path))
        path = e.path();
    if (path.empty()) {
      std::string names;
      for (const auto& n : ListHardwareProfiles()) names += (names.empty() ? "" : ", ") + n;
      return NotFound("hardware profile '" + name_or_path + "' not found in " + dir +
                      "/hardware (known: " + names + ")");
    }
  }
  std::ifstream in(path);
  if (!in) return NotFound("cannot open hardware profile " + path.string());
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (j.is_discarded()) return InvalidArgument("hardware profile " + path.string() + ": invalid JSON");
  auto h = ParseHardwareProfile(j);
  if (!h.ok()) return InvalidArgument(path.string() + ": " + h.status().message());
  return h;
}

}  // namespace ds::planner
