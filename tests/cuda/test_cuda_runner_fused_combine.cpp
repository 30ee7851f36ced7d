// CudaRunnerOptions::mla_decode_fused_combine (the warp-split MLA decode kernel merges its KV
// splits itself; MlaDecodeParams::tc_fused_combine) on the whole model: dummy V2-Lite, its one
// dense layer (16 heads: the warp-split kernel when a pass has > 32K keys of total context),
// the option off and on. A short prefill of 4 sequences (100 tokens each), then decode steps of
// 4 sequences at ~9,000-token contexts (36K+ keys in total, so the warp-split kernel with several
// splits per sequence; the cache rows between the prefill and the decode positions are the
// runner's zero-initialised cache) with CUDA graphs on (eager warm-up, capture, replays with
// growing lengths: the counters must reset themselves between replays). The fused merge repeats
// the combine kernel's arithmetic, so the logits should be bit-identical; the hard bound is every
// row's cosine >= 0.9999 (as CudaRunnerDecodeChunk) with no non-finite value, and the number of
// differing logits is logged.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

std::vector<float> LongDecodeLogits(CudaRunnerOptions o, int64_t* vocab) {
  constexpr int kSeqs = 4, kMaxBlocks = 160, kPrefill = 100;
  o.num_kv_blocks = kSeqs * kMaxBlocks;
  auto r = CreateCudaModelRunner(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  ModelRunner& m = **r;
  const int64_t V = m.config().vocab_size;
  *vocab = V;
  auto token = [&](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 5) % V); };
  const ForwardBatch pre = PrefillBatch(std::vector<int>(kSeqs, kPrefill), kMaxBlocks, token);
  ForwardOutput pout;
  auto st = m.Forward(pre, &pout);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<int> ctx = {9000, 8999, 9100, 9050};  // decode positions (rows before them: prefill or zeros)
  std::vector<float> logits;
  for (int step = 0; step < 6; ++step) {
    std::vector<int> seqs(kSeqs);
    for (int s = 0; s < kSeqs; ++s) seqs[s] = s;
    const ForwardBatch b = DecodeBatch(seqs, ctx, kMaxBlocks, token);
    for (int s = 0; s < kSeqs; ++s) ctx[s] += 1 + step * 37;  // lengths change between replays
    ForwardOutput out;
    st = m.Forward(b, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

TEST(CudaRunnerFusedCombine, DummyV2LiteDenseLongContext) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.load_format = "dummy";
  o.num_layers = 1;  // V2-Lite's one dense layer
  o.seed = 31;
  int64_t V = 0;
  o.mla_decode_fused_combine = false;
  const auto base = LongDecodeLogits(o, &V);
  o.mla_decode_fused_combine = true;
  const auto fused = LongDecodeLogits(o, &V);
  ASSERT_FALSE(base.empty());
  ASSERT_EQ(base.size(), fused.size());
  const int64_t rows = static_cast<int64_t>(base.size()) / V;
  double min_cos = 1;
  int64_t nonfinite = 0, differ = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double a = base[r * V + j], b = fused[r * V + j];
      nonfinite += !std::isfinite(b);
      differ += !(base[r * V + j] == fused[r * V + j]);
      dot += a * b; na += a * a; nb += b * b;
    }
    min_cos = std::min(min_cos, dot / std::sqrt(na * nb + 1e-300));
  }
  const bool pass = nonfinite == 0 && min_cos >= 0.9999;
  std::printf("[fixture] dummy_v2lite_1layer mla_decode fused_combine_vs_combine: rows=%lld min_cosine=%.7f "
              "differing_logits=%lld (expected 0) nonfinite=%lld%s\n", (long long)rows, min_cos, (long long)differ,
              (long long)nonfinite, pass ? " PASS" : " FAIL");
  EXPECT_EQ(nonfinite, 0);
  EXPECT_GE(min_cos, 0.9999);
}

}  // namespace
}  // namespace ds::cuda::test
