// LoadTensorF32: dtype conversion, FP8 block dequantisation (partial edge blocks), and the
// errors for missing / mis-shaped tensors and scales.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "runtime/cpu_runner.h"

namespace ds {
namespace {

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes a well-formed safetensors file (header padded to 8 bytes, contiguous spans).
void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  size_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream f(path, std::ios::binary);
  uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), hs.size());
  for (const auto& t : ts) f.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ds_weights_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<Checkpoint> Open(const std::vector<RawTensor>& ts) {
    WriteSafetensors((dir_ / "model.safetensors").string(), ts);
    auto c = Checkpoint::Open(dir_.string());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  std::filesystem::path dir_;
};

TEST_F(WeightsTest, ConvertsBf16F16F32Exactly) {
  std::vector<float> vals = {1.5f, -2.25f, 0.0f, 3.0e-3f, 65504.0f, -1.0e-5f};
  std::vector<uint16_t> bf, hf;
  for (float v : vals) {
    bf.push_back(F32ToBf16(v));
    hf.push_back(F32ToF16(v));
  }
  auto c = Open({{"a", "BF16", {2, 3}, Bytes(bf)}, {"b", "F16", {6}, Bytes(hf)}, {"c", "F32", {3, 2}, Bytes(vals)}});
  ASSERT_NE(c, nullptr);
  auto a = LoadTensorF32(*c, "a", {2, 3});
  auto b = LoadTensorF32(*c, "b", {6});
  auto f = LoadTensorF32(*c, "c", {3, 2});
  ASSERT_TRUE(a.ok() && b.ok() && f.ok());
  for (size_t i = 0; i < vals.size(); ++i) {
    EXPECT_EQ((*a)[i], Bf16ToF32(bf[i]));
    EXPECT_EQ((*b)[i], F16ToF32(hf[i]));
    EXPECT_EQ((*f)[i], vals[i]);
  }
}

TEST_F(WeightsTest, Fp8BlockDequantWithPartialBlocks) {
  const int64_t R = 130, C = 200;  // blocks: rows 128 + 2, cols 128 + 72
  std::mt19937 g(3);
  std::vector<uint8_t> q(R * C);
  for (auto& x : q) {
    do x = static_cast<uint8_t>(g()); while ((x & 0x7f) == 0x7f);  // no NaN codes
  }
  std::vector<float> s = {0.5f, 2.0f, 0.125f, 8.0f};  // [2, 2]
  auto c = Open({{"w", "F8_E4M3", {R, C}, q}, {"w_scale_inv", "F32", {2, 2}, Bytes(s)}});
  ASSERT_NE(c, nullptr);
  auto w = LoadTensorF32(*c, "w", {R, C});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int64_t i : {0L, 127L, 128L, 129L})
    for (int64_t j : {0L, 127L, 128L, 199L})
      EXPECT_EQ((*w)[i * C + j], Fp8E4M3ToF32(q[i * C + j]) * s[(i / 128) * 2 + j / 128]) << i << "," << j;
}

TEST_F(WeightsTest, ErrorsNameTheTensor) {
  std::vector<uint16_t> bf(6, F32ToBf16(1.0f));
  std::vector<uint8_t> q(4 * 4, 0x38);
  std::vector<float> s1 = {1.0f}, s2 = {1.0f, 1.0f};
  std::vector<int8_t> i8(4, 1);
  auto c = Open({{"a", "BF16", {2, 3}, Bytes(bf)},
                 {"noscale", "F8_E4M3", {4, 4}, q},
                 {"badscale", "F8_E4M3", {4, 4}, q},
                 {"badscale_scale_inv", "F32", {1, 2}, Bytes(s2)},
                 {"ints", "I8", {4}, Bytes(i8)}});
  ASSERT_NE(c, nullptr);
  auto missing = LoadTensorF32(*c, "model.layers.0.mlp.gate_proj.weight", {2, 3});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos);
  auto shape = LoadTensorF32(*c, "a", {3, 2});
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("[2, 3]"), std::string::npos) << shape.status().message();
  auto ns = LoadTensorF32(*c, "noscale", {4, 4});
  EXPECT_FALSE(ns.ok());
  EXPECT_NE(ns.status().message().find("noscale_scale_inv"), std::string::npos);
  auto bs = LoadTensorF32(*c, "badscale", {4, 4});
  EXPECT_FALSE(bs.ok());
  EXPECT_NE(bs.status().message().find("badscale_scale_inv"), std::string::npos);
  auto ints = LoadTensorF32(*c, "ints", {4});
  EXPECT_EQ(ints.status().code(), StatusCode::kUnimplemented);
}

// Copies fixture `name` into dir_ with `drop` removed from the checkpoint and config.json
// fields overridden by `patch`.
void CopyFixture(const std::filesystem::path& dir, const std::string& name, const std::string& drop,
                 const nlohmann::json& patch) {
  const std::string src = std::string(DS_TEST_DATA_DIR) + "/" + name;
  auto ck = Checkpoint::Open(src);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  std::vector<RawTensor> ts;
  for (const auto& n : (*ck)->Names()) {
    if (n == drop) continue;
    const TensorView* t = (*ck)->Find(n);
    ts.push_back({n, DTypeName(t->dtype), t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)});
  }
  WriteSafetensors((dir / "model.safetensors").string(), ts);
  std::ifstream cf(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cf);
  if (!patch.is_null()) cfg.merge_patch(patch);
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

TEST_F(WeightsTest, ModelLoadNamesMissingTensor) {
  CopyFixture(dir_, "v3_fp8_tiny", "model.layers.1.mlp.experts.3.up_proj.weight_scale_inv", nlohmann::json::object());
  auto r = CpuModelRunner::Create(dir_.string(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.1.mlp.experts.3.up_proj.weight_scale_inv"),
            std::string::npos) << r.status().ToString();
  CopyFixture(dir_, "v3_tiny", "model.layers.2.mlp.gate.e_score_correction_bias", nlohmann::json::object());
  r = CpuModelRunner::Create(dir_.string(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("e_score_correction_bias"), std::string::npos) << r.status().ToString();
}

TEST_F(WeightsTest, ModelLoadRejectsMisshapedTensor) {
  // A config whose kv_lora_rank disagrees with the checkpoint.
  CopyFixture(dir_, "v2_lite_tiny", "", {{"kv_lora_rank", 48}});
  auto r = CpuModelRunner::Create(dir_.string(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_a_proj_with_mqa"), std::string::npos) << r.status().ToString();
}

TEST_F(WeightsTest, MtpAbsentMeansMtpOff) {
  CopyFixture(dir_, "v3_tiny", "", {{"num_nextn_predict_layers", 1}});
  auto r = CpuModelRunner::Create(dir_.string(), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->config().num_nextn_predict_layers, 1);
  EXPECT_FALSE((*r)->model().mtp_available());
}

}  // namespace
}  // namespace ds
