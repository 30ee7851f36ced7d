#include "runtime/dummy_checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/tensor_specs.h"
#include "common/rng.h"

namespace ds {

namespace {

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  int kind;  // 0 random (fan_in = shape[1]), 1 ones, 2 zeros, 3 random embedding
};

}  // namespace

StatusOr<std::string> MakeScratchDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return Internal("cannot create a scratch directory under " + tmpl);
  return std::string(buf.data());
}

Status WriteDummyCheckpoint(const nlohmann::json& config_json, uint64_t seed, const std::string& out_dir) {
  nlohmann::json cj = config_json;
  cj.erase("quantization_config");
  cj["num_nextn_predict_layers"] = 0;
  DS_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(cj));
  // Names and shapes: the loader's own list (model/tensor_specs.h).
  std::vector<Spec> specs;
  for (const TensorSpec& t : ExpectedTensors(c, /*include_mtp=*/false)) {
    if (t.scale_inv) continue;
    int kind = 0;
    if (t.module == WeightModule::kNorm) kind = 1;
    else if (t.name.ends_with(".bias") || t.name.ends_with("e_score_correction_bias")) kind = 2;
    else if (t.module == WeightModule::kEmbedding) kind = 3;
    specs.push_back({t.name, t.shape, kind});
  }
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    header[s.name] = {{"dtype", "BF16"}, {"shape", s.shape}, {"data_offsets", {offset, offset + 2 * n}}};
    offset += 2 * n;
  }
  header["__metadata__"] = {{"format", "pt"}, {"dsinfer", "dummy"}};
  std::string hs = header.dump();
  while (hs.size() % 8) hs.push_back(' ');
  std::ofstream out(out_dir + "/model.safetensors", std::ios::binary);
  if (!out) return Internal("cannot write " + out_dir + "/model.safetensors");
  const uint64_t hlen = hs.size();
  out.write(reinterpret_cast<const char*>(&hlen), 8);
  out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  std::vector<uint16_t> buf;
  for (size_t si = 0; si < specs.size(); ++si) {
    const Spec& s = specs[si];
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    buf.resize(n);
    const float scale = s.kind == 3 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(s.shape.size() > 1 ? s.shape[1] : 1));
    const uint64_t base = SplitMix64(seed ^ SplitMix64(si + 1));
    for (int64_t i = 0; i < n; ++i) {
      float v;
      if (s.kind == 1) v = 1.0f;
      else if (s.kind == 2) v = 0.0f;
      else v = (static_cast<float>(SplitMix64(base + static_cast<uint64_t>(i)) >> 40) * (2.0f / 16777216.0f) - 1.0f) * scale;
      buf[i] = ToBf16(v);
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(2 * n));
  }
  if (!out) return Internal("write failed: " + out_dir + "/model.safetensors");
  std::ofstream cfg_out(out_dir + "/config.json");
  cfg_out << cj.dump(1);
  if (!cfg_out) return Internal("cannot write " + out_dir + "/config.json");
  return Status::Ok();
}

}  // namespace ds
