// CudaRunnerOptions::fp8_gemv_experts on the whole model: the FP8 routed experts of passes of
// <= 8 tokens on Fp8GemvGrouped (fp8_gemv_grouped.h) instead of SkinnyGemm's grouped form; and
// gemv_experts_bf16, the same for BF16 routed experts (w_bf16; CudaRunnerGemvExpertsBf16.*:
// dummy DeepSeek-V2-Lite, the v2_lite_tiny and v3_fp8_tiny fixtures' bf16 experts, and dummy V3
// whose FP8 experts it must leave alone; passes on the H200, session 8 run 3). Same
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

// Which grouped GEMV a comparison turns on: the runner option and the launch count it bumps.
struct ExpertsPath {
  const char* option;
  bool CudaRunnerOptions::*flag;
  int64_t CudaGraphStats::*launches;
};
const ExpertsPath kFp8Path{"fp8_gemv_experts", &CudaRunnerOptions::fp8_gemv_experts,
                           &CudaGraphStats::fp8_gemv_expert_launches};
const ExpertsPath kBf16Path{"gemv_experts_bf16", &CudaRunnerOptions::gemv_experts_bf16,
                            &CudaGraphStats::bf16_gemv_expert_launches};

// expect_path: the grouped GEMV must run in the on runner (experts of the path's weight type)
// and, with require_change, change some logits; else it must not run at all and the logits
// must be bit-identical.
void CompareExperts(const ExpertsPath& path, const std::string& label, CudaRunnerOptions o, bool graphs,
                    bool expect_path, bool require_change = true) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: SkinnyGemm experts, 1: the grouped GEMV
  MakeRunnerPair(o, [&](CudaRunnerOptions& x, bool on) { x.*path.flag = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  RowDiff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const int64_t on = g1.*path.launches, off = g0.*path.launches;
  const bool changed = d.identical_rows < d.rows;
  const bool path_ok = expect_path ? on > 0 && (changed || !require_change) : on == 0 && !changed;
  const bool pass = d.nonfinite == 0 && d.min_cos >= 0.9999 && d.max_rel <= 1e-2 && path_ok && off == 0 &&
                    (!graphs || g1.replayed > 0);
  std::printf("[fixture] %s %s graphs=%d: rows=%lld min_cos=%.7f max_rel_l2=%.3e identical_rows=%lld "
              "nonfinite=%lld expert gemv launches=%lld (off runner %lld) replayed=%lld%s\n",
              label.c_str(), path.option, graphs ? 1 : 0, (long long)d.rows, d.min_cos, d.max_rel,
              (long long)d.identical_rows, (long long)d.nonfinite, (long long)on, (long long)off,
              (long long)g1.replayed, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_GE(d.min_cos, 0.9999) << label;
  EXPECT_LE(d.max_rel, 1e-2) << label;
  EXPECT_EQ(off, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
  if (expect_path) {
    EXPECT_GT(on, 0) << label << ": the grouped GEMV never ran";
    if (require_change) { EXPECT_TRUE(changed) << label << ": on and off gave identical logits (did the GEMV run?)"; }
  } else {
    EXPECT_EQ(on, 0) << label << ": ran on experts of the other weight type";
    EXPECT_EQ(d.identical_rows, d.rows) << label << ": the option changed a model it does not apply to";
  }
}

TEST(CudaRunnerFp8GemvExperts, DummyV3MatchesSkinnyExperts) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  ForFusionsAndGraphs("dummy_v3_4layers", DummyOptions(dir, 4, 11), [](const std::string& label,
                                                                      const CudaRunnerOptions& o, bool graphs) {
    CompareExperts(kFp8Path, label, o, graphs, /*expect_path=*/true);
  });
}

TEST(CudaRunnerFp8GemvExperts, FixtureBf16ExpertsUnchanged) {
  const int ran = ForEachFixture({"v3_fp8_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    for (bool graphs : {false, true}) CompareExperts(kFp8Path, name, o, graphs, /*expect_path=*/false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

// gemv_experts_bf16 on dummy DeepSeek-V2-Lite (3 layers: 1 dense + 2 MoE layers of 64 bf16
// experts, top-6, 2 shared experts; with fusions=all the shared experts stacked as groups 64
// and 65).
TEST(CudaRunnerGemvExpertsBf16, DummyV2LiteMatchesSkinnyExperts) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  ForFusionsAndGraphs("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), [](const std::string& label,
                                                                         const CudaRunnerOptions& o, bool graphs) {
    CompareExperts(kBf16Path, label, o, graphs, /*expect_path=*/true);
  });
}

// The fixtures' real (tiny) bf16 experts: v2_lite_tiny (16 experts, gate_up K = 64, down K = 32)
// and v3_fp8_tiny (FP8 dense weights, its experts stacked as bf16: moe_intermediate_size 80, so
// down K = 80, not a multiple of 64). With one or two 64-k units per tile the two kernels may
// sum in the same order, so identical logits are allowed here (the GEMV must still have run).
TEST(CudaRunnerGemvExpertsBf16, FixturesMatchSkinnyExperts) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_fp8_tiny"}, [](const std::string& name,
                                                                     const CudaRunnerOptions& o) {
    for (bool graphs : {false, true})
      CompareExperts(kBf16Path, name, o, graphs, /*expect_path=*/true, /*require_change=*/false);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

// FP8 experts (dummy V3): the bf16 option must not apply (no launch, bit-identical logits).
TEST(CudaRunnerGemvExpertsBf16, DummyV3Fp8ExpertsUnchanged) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareExperts(kBf16Path, "dummy_v3_4layers", DummyOptions(dir, 4, 11), /*graphs=*/false, /*expect_path=*/false);
}

}  // namespace
}  // namespace ds::cuda::test
