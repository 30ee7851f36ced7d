// CudaRunnerOptions::fp8_gemv on the whole model: dummy DeepSeek-V3 (its first 3 layers: the
// dense ones, FP8 dummy weights with 128x128 block scales), FP8 dense projections of <= 8 rows
// on Fp8Gemv (fp8_gemv.h) instead of SkinnyGemm.
//
// FlagOnVsOff: the same weights (same seed) with the flag off and on, through a prefill of 5
// tokens (M = 5: the GEMV too), a prefill of the other sequences (M > 8: SkinnyGemm / big-tile
// in both), decode steps of 1..8 sequences (graphs on: eager first step per shape, then
// replays) and one of 12 (the skinny path in both). Not bit-identical: the two kernels compute
// the same exact products (e4m3 -> bf16 exact, bf16 x bf16 exact in fp32) but sum them in
// another fp32 order (128-k blocks and split-K partials in k order vs 64-k chunks), ~1e-7 ..
// 1e-6 relative per GEMM output; between GEMMs the activations are rounded to bf16 (2^-9), and
// an fp32 difference that flips one of those roundings, then the softmax and SiLU of three
// layers, grows the per-row difference towards the bf16 noise floor (~1e-4 .. 1e-3 relative
// L2). Bound per row: cosine >= 0.9999 and relative L2 <= 1e-2 (an order of magnitude above
// that floor; a wrong row, a missing scale, a dropped k block, would be far outside). The flag
// must have taken effect (fp8_gemv_launches > 0 on the flag-on runner, 0 on the other) and
// changed some logits.
//
// GraphsMatchEager (flag on): graphs on vs off over decode steps of 1..8 sequences. With the
// CUDA-core MLA decode (its split plan does not depend on the graph's capacity hints), a step
// of a bucket size (1, 2, 4, 8) runs the same kernels at the same shapes in both runners, so
// rows must match within 1e-6 relative L2 (expected bitwise); a padded step (3 -> 4, 5 -> 8)
// runs the other (bf16, cuBLAS) GEMMs at the padded M, so its rows are bounded by cosine >=
// 0.999 as in CudaRunner.GraphDecodeMatchesEager* (the GEMV's rows do not depend on M). With the
// default decode kernels every row is bounded by cosine >= 0.999 (the sm_90a decode plans its
// splits from the bucket's hints in a graph: CudaRunner.GraphDecodeMatchesEagerDummyV3DenseSm90Decode).
// Written without a GPU; passes on the H200 (session 6 runs 10-11).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int kSeqs = 12, kMaxBlocks = 8;

// Runs b through both runners; adds every logits row's difference to d (bucketed by `exact`).
void RunPair(std::array<std::unique_ptr<ModelRunner>, 2>& r, const ForwardBatch& b, int64_t V, RowDiff* d) {
  std::array<ForwardOutput, 2> out;
  for (int i = 0; i < 2; ++i) {
    auto st = r[i]->Forward(b, &out[i]);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const int64_t n = static_cast<int64_t>(b.logits_indices.size());
  for (int64_t row = 0; row < n; ++row) d->Add(out[0].logits.data() + row * V, out[1].logits.data() + row * V, V);
}

auto Token(int64_t V) {
  return [V](int s, int p) { return static_cast<int32_t>((int64_t{s} * 7919 + int64_t{p} * 104729 + 3) % V); };
}

TEST(CudaRunnerFp8Gemv, DummyV3FlagOnVsOff) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 17);
  o.num_kv_blocks = kSeqs * kMaxBlocks;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: flag off (SkinnyGemm), 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fp8_gemv = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  const int64_t V = runners[0]->config().vocab_size;
  const auto token = Token(V);
  std::vector<int> ctx(kSeqs);
  for (int s = 0; s < kSeqs; ++s) ctx[s] = s == 0 ? 5 : 20 + (s * 37) % 200;
  RowDiff d;
  RunPair(runners, PrefillBatch({ctx[0]}, kMaxBlocks, token), V, &d);  // 5 tokens: the GEMV
  // Sequences 1 .. kSeqs - 1 in one pass (> 8 tokens: the skinny / big-tile GEMMs).
  RunPair(runners, PrefillBatch(ctx, kMaxBlocks, token, true, /*first=*/1), V, &d);
  const std::vector<int> sizes = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 8, 8, 12, 6, 6, 1};
  for (size_t step = 0; step < sizes.size(); ++step) {
    std::vector<int> seqs;
    for (int i = 0; i < sizes[step]; ++i) seqs.push_back(static_cast<int>((step * 5 + i) % kSeqs));
    RunPair(runners, DecodeBatch(seqs, ctx, kMaxBlocks, token), V, &d);
    for (int s : seqs) ++ctx[s];
  }
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool pass = d.nonfinite == 0 && d.min_cos >= 0.9999 && d.max_rel <= 1e-2 && g1.fp8_gemv_launches > 0 &&
                    g0.fp8_gemv_launches == 0 && d.identical_rows < d.rows && g1.replayed > 0;
  std::printf("[fixture] dummy_v3_3layers fp8_gemv on_vs_off: rows=%lld identical_rows=%lld min_cosine=%.7f "
              "max_rel_l2=%.3e nonfinite=%lld gemv launches=%lld (off runner %lld) graphs replayed=%lld "
              "(bounds: cosine >= 0.9999, rel_l2 <= 1e-2)%s\n",
              (long long)d.rows, (long long)d.identical_rows, d.min_cos, d.max_rel, (long long)d.nonfinite,
              (long long)g1.fp8_gemv_launches, (long long)g0.fp8_gemv_launches, (long long)g1.replayed,
              pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0);
  EXPECT_GE(d.min_cos, 0.9999);
  EXPECT_LE(d.max_rel, 1e-2);
  EXPECT_GT(g1.fp8_gemv_launches, 0) << "the GEMV never ran";
  EXPECT_EQ(g0.fp8_gemv_launches, 0);
  EXPECT_LT(d.identical_rows, d.rows) << "flag on and off gave identical logits: did the GEMV run?";
  EXPECT_GT(g1.replayed, 0);
}

// Flag on, graphs on ([0]) vs off ([1]); see the file comment for the bounds.
void GraphsVsEager(const std::string& label, CudaRunnerOptions o, bool exact) {
  o.num_kv_blocks = kSeqs * kMaxBlocks;
  o.fp8_gemv = true;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool eager) { x.cuda_graphs = !eager; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  const int64_t V = runners[0]->config().vocab_size;
  const auto token = Token(V);
  std::vector<int> ctx(kSeqs);
  for (int s = 0; s < kSeqs; ++s) ctx[s] = 1 + (s * 97) % 300;
  RowDiff pre, bucket, padded;
  RunPair(runners, PrefillBatch(ctx, kMaxBlocks, token), V, &pre);
  const std::set<int> buckets = {1, 2, 4, 8};
  const std::vector<int> sizes = {1, 1, 3, 3, 8, 8, 5, 5, 2, 2, 4, 4, 7, 7};
  for (size_t step = 0; step < sizes.size(); ++step) {
    std::vector<int> seqs;
    for (int i = 0; i < sizes[step]; ++i) seqs.push_back(static_cast<int>((step * 3 + i) % kSeqs));
    RunPair(runners, DecodeBatch(seqs, ctx, kMaxBlocks, token), V, buckets.count(sizes[step]) ? &bucket : &padded);
    for (int s : seqs) ++ctx[s];
  }
  const CudaGraphStats g = GetCudaGraphStats(*runners[0]), e = GetCudaGraphStats(*runners[1]);
  const double min_cos = std::min(bucket.min_cos, padded.min_cos);
  const bool pass = pre.max_rel == 0 && bucket.nonfinite + padded.nonfinite == 0 &&
                    (exact ? bucket.max_rel <= 1e-6 && padded.min_cos >= 0.999 : min_cos >= 0.999) &&
                    g.replayed > 0 && g.fp8_gemv_launches > 0 && e.fp8_gemv_launches > 0;
  std::printf("[fixture] %s fp8_gemv graphs_vs_eager: prefill rows=%lld max_rel_l2=%.3e; bucket-size rows=%lld "
              "max_rel_l2=%.3e identical=%lld; padded rows=%lld max_rel_l2=%.3e min_cosine=%.7f; nonfinite=%lld; "
              "captured=%lld replayed=%lld gemv launches=%lld / %lld%s\n",
              label.c_str(), (long long)pre.rows, pre.max_rel, (long long)bucket.rows, bucket.max_rel,
              (long long)bucket.identical_rows, (long long)padded.rows, padded.max_rel, padded.min_cos,
              (long long)(bucket.nonfinite + padded.nonfinite), (long long)g.captured, (long long)g.replayed,
              (long long)g.fp8_gemv_launches, (long long)e.fp8_gemv_launches, pass ? " PASS" : " FAIL");
  EXPECT_EQ(pre.max_rel, 0.0) << "the prefill runs eagerly in both";
  EXPECT_EQ(bucket.nonfinite + padded.nonfinite, 0);
  if (exact) {
    EXPECT_LE(bucket.max_rel, 1e-6);
    EXPECT_GE(padded.min_cos, 0.999);
  } else {
    EXPECT_GE(min_cos, 0.999);
  }
  EXPECT_GT(g.replayed, 0);
  EXPECT_GT(g.fp8_gemv_launches, 0);
  EXPECT_GT(e.fp8_gemv_launches, 0);
  EXPECT_EQ(e.captured + e.replayed, 0);
}

TEST(CudaRunnerFp8Gemv, DummyV3GraphsMatchEagerCudaCoreDecode) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CudaRunnerOptions o = DummyOptions(dir, 3, 23);
  o.mla_decode_tensor_cores = false;
  GraphsVsEager("dummy_v3_3layers cuda-core-decode", o, /*exact=*/true);
}

TEST(CudaRunnerFp8Gemv, DummyV3GraphsMatchEagerDefaultDecode) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  GraphsVsEager("dummy_v3_3layers default-decode", DummyOptions(dir, 3, 23), /*exact=*/false);
}

}  // namespace
}  // namespace ds::cuda::test
