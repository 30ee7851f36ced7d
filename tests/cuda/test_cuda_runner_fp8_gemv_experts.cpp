// CudaRunnerOptions::fp8_gemv_experts on the whole model: the FP8 routed experts of passes of
// <= 8 tokens on Fp8GemvGrouped (fp8_gemv_grouped.h) instead of SkinnyGemm's grouped form. Same
// runner options otherwise, the same dummy weights; RunFusionSchedule (runner_test_util.h: a
// 9-token prefill (SkinnyGemm in both: > 8 tokens), a prefill of 20-219-token sequences (the
// big-tile kernels in both), decode steps of 1..24 sequences (1, 2, 3, 5, 8 tokens: the grouped
// GEMV in the on runner; 16 and 24: SkinnyGemm in both), a mixed 7-token step (the grouped
// GEMV)), graphs off and on, with the decode fusions at their defaults and all on (fused
// shared experts: the shared expert stacked as group E with T rows, the down projection's
// output fp32).
//
// Not bit-identical: both kernels compute the same exact products (e4m3 -> bf16 exact, bf16 x
// bf16 exact in fp32) but sum them in another fp32 order (128-k blocks and split-K partials in
// k order vs 64-k chunks), and the bf16 activations between layers carry the difference on.
// Bounds per row as CudaRunnerFp8Gemv / CudaRunnerRouterGemv: cosine >= 0.9999, relative L2
// <= 1e-2 (a wrong expert, row or scale would be far outside), no non-finite logits. On dummy
// DeepSeek-V3 (4 layers: 3 dense + 1 MoE layer of 256 FP8 experts) the on runner must have
// launched the grouped GEMV (CudaGraphStats::fp8_gemv_expert_launches > 0, 0 in the off runner)
// and changed some logits. The fixture v3_fp8_tiny has FP8 dense weights but its experts
// (moe_intermediate_size 80, not a multiple of 128) are stacked as bf16, so the option must not
// apply there: no launch, bit-identical logits (the dispatch condition). Written without a GPU;
// passes on the H200 (session 7 run 11).
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// expect_path: the grouped GEMV must run in the on runner (FP8 experts) and change some logits;
// else it must not run at all and the logits must be bit-identical.
void CompareExperts(const std::string& label, CudaRunnerOptions o, bool graphs, bool expect_path) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: SkinnyGemm experts, 1: Fp8GemvGrouped
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.fp8_gemv_experts = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  RowDiff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool path_ok = expect_path ? g1.fp8_gemv_expert_launches > 0 && d.identical_rows < d.rows
                                   : g1.fp8_gemv_expert_launches == 0 && d.identical_rows == d.rows;
  const bool pass = d.nonfinite == 0 && d.min_cos >= 0.9999 && d.max_rel <= 1e-2 && path_ok &&
                    g0.fp8_gemv_expert_launches == 0 && (!graphs || g1.replayed > 0);
  std::printf("[fixture] %s fp8_gemv_experts graphs=%d: rows=%lld min_cos=%.7f max_rel_l2=%.3e identical_rows=%lld "
              "nonfinite=%lld expert gemv launches=%lld (off runner %lld) replayed=%lld%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel, (long long)d.identical_rows,
              (long long)d.nonfinite, (long long)g1.fp8_gemv_expert_launches, (long long)g0.fp8_gemv_expert_launches,
              (long long)g1.replayed, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_GE(d.min_cos, 0.9999) << label;
  EXPECT_LE(d.max_rel, 1e-2) << label;
  EXPECT_EQ(g0.fp8_gemv_expert_launches, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
  if (expect_path) {
    EXPECT_GT(g1.fp8_gemv_expert_launches, 0) << label << ": the grouped GEMV never ran";
    EXPECT_LT(d.identical_rows, d.rows) << label << ": on and off gave identical logits (did the GEMV run?)";
  } else {
    EXPECT_EQ(g1.fp8_gemv_expert_launches, 0) << label << ": ran on non-FP8 experts";
    EXPECT_EQ(d.identical_rows, d.rows) << label << ": the option changed a model it does not apply to";
  }
}

TEST(CudaRunnerFp8GemvExperts, DummyV3MatchesSkinnyExperts) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  ForFusionsAndGraphs("dummy_v3_4layers", DummyOptions(dir, 4, 11), [](const std::string& label,
                                                                      const CudaRunnerOptions& o, bool graphs) {
    CompareExperts(label, o, graphs, /*expect_path=*/true);
  });
}

TEST(CudaRunnerFp8GemvExperts, FixtureBf16ExpertsUnchanged) {
  const int ran = ForEachFixture({"v3_fp8_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    for (bool graphs : {false, true}) CompareExperts(name, o, graphs, /*expect_path=*/false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
