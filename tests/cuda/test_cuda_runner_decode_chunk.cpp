// CudaRunnerOptions::mla_decode_small_batch_chunk (64-key minimum KV splits for decode passes of
// <= 8 tokens) on the whole model: the same dummy weights with the option off and at 64, a
// prefill of 4 sequences (70 - 1,000 tokens), then decode steps of 1, 2, 3 and 4 sequences
// (CUDA graphs on: replays and padded buckets). Only the split plan of the MLA decode differs
// (more, shorter splits, then the LSE combine), so the logits differ by fp32 summation order and
// the bf16 rounding of P within other splits: every row cosine >= 0.9999 (the bound of the
// tensor-core-vs-emulation check on the dense layers, test_cuda_runner.cpp), no non-finite
// value. Dense layers only (V3's first 3, V2-Lite's first 1), so no MoE routing near-tie can
// amplify the difference. Cases: V3 dims with the sm_90a decode kernel (the default at 128
// heads) and with the mma.sync kernel, V2-Lite dims (16 heads: the row-tile kernel).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// Logits of every decode row (in step order) of the fixed schedule above.
std::vector<float> DecodeLogits(CudaRunnerOptions o, int64_t* vocab) {
  constexpr int kSeqs = 4, kMaxBlocks = 24;
  o.num_kv_blocks = kSeqs * kMaxBlocks;
  auto r = CreateCudaModelRunner(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  ModelRunner& m = **r;
  const int64_t V = m.config().vocab_size;
  *vocab = V;
  std::vector<int> ctx = {1000, 70, 431, 257};
  auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 5) % V); };
  const ForwardBatch pre = PrefillBatch(ctx, kMaxBlocks, token);
  ForwardOutput pout;
  auto st = m.Forward(pre, &pout);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<float> logits;
  for (int n : {1, 1, 2, 2, 3, 3, 4, 4, 1}) {
    std::vector<int> seqs;
    for (int s = 0; s < n; ++s) seqs.push_back(s);
    const ForwardBatch b = DecodeBatch(seqs, ctx, kMaxBlocks, token);
    for (int s : seqs) ++ctx[s];
    ForwardOutput out;
    st = m.Forward(b, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

void CompareChunks(const std::string& label, CudaRunnerOptions o) {
  int64_t V = 0;
  o.mla_decode_small_batch_chunk = 0;
  const auto base = DecodeLogits(o, &V);
  o.mla_decode_small_batch_chunk = 64;
  const auto small = DecodeLogits(o, &V);
  ASSERT_FALSE(base.empty());
  ASSERT_EQ(base.size(), small.size());
  const int64_t rows = static_cast<int64_t>(base.size()) / V;
  double min_cos = 1, max_rel = 0;
  int64_t nonfinite = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0, na = 0, nb = 0, d2 = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double a = base[r * V + j], b = small[r * V + j];
      nonfinite += !std::isfinite(b);
      dot += a * b; na += a * a; nb += b * b; d2 += (a - b) * (a - b);
    }
    min_cos = std::min(min_cos, dot / std::sqrt(na * nb + 1e-300));
    max_rel = std::max(max_rel, std::sqrt(d2 / (na + 1e-300)));
  }
  const bool pass = nonfinite == 0 && min_cos >= 0.9999;
  std::printf("[fixture] %s mla_decode small_batch_chunk64_vs_256: rows=%lld min_cosine=%.7f max_rel_l2=%.3e "
              "nonfinite=%lld%s\n", label.c_str(), (long long)rows, min_cos, max_rel, (long long)nonfinite,
              pass ? " PASS" : " FAIL");
  EXPECT_EQ(nonfinite, 0) << label;
  EXPECT_GE(min_cos, 0.9999) << label;
}

TEST(CudaRunnerDecodeChunk, DummyV3DenseSm90) {
  if (ConfigDir("deepseek-v3").empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareChunks("dummy_v3_3layers sm90", DummyV3Options(3, 0, 31));
}

TEST(CudaRunnerDecodeChunk, DummyV3DenseMmaSync) {
  if (ConfigDir("deepseek-v3").empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyV3Options(3, 0, 31);
  o.mla_decode_sm90 = false;
  CompareChunks("dummy_v3_3layers mma.sync", o);
}

TEST(CudaRunnerDecodeChunk, DummyV2LiteDense) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.load_format = "dummy";
  o.num_layers = 1;  // V2-Lite's one dense layer
  o.seed = 31;
  CompareChunks("dummy_v2lite_1layer", o);
}

TEST(CudaRunnerDecodeChunk, RejectsChunksNotAMultipleOf64) {
  if (ConfigDir("deepseek-v3").empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyV3Options(1, 8, 1);
  o.mla_decode_small_batch_chunk = 96;
  auto r = CreateCudaModelRunner(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple of 64"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace ds::cuda::test
