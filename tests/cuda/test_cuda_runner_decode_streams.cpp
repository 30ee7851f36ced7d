// CudaRunnerOptions::decode_streams on the whole model: in captured decode graphs the MLA q
// projection, the q absorption (decode-only passes) and the MoE shared experts run as side
// branches on a second stream (forked and joined by events), with their own GEMM scratch;
// eager passes run the same work in order. The
// same kernels read and write the same buffers either way, so the logits must be bit-identical
// (max |diff| 0) to a runner with it off, through RunFusionSchedule (runner_test_util.h:
// prefill, decode steps of 1..24 sequences, a mixed step), CUDA graphs off and on, the decode
// fusions at their defaults and all on (fused_moe_shared: the shared experts stacked, so only
// the q branch), and with precise_activations (the side branch's bf16 hi + lo splits). With
// graphs on, the captures must have forked side branches (CudaGraphStats::side_branches).
// Models: the fixtures (bf16 and FP8), dummy V2-Lite (bf16: the side branch's GEMMs on
// cuBLASLt with its own workspace) and dummy V3 (FP8: split-K skinny GEMMs with their own
// counters, the FP8 GEMV). Passed on the H200 before the absorption branch was added (session 7
// run 2: every case bit-identical, side branches forked in every graph run).
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void CompareStreams(const std::string& label, CudaRunnerOptions o, bool graphs) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: decode_streams off, 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.decode_streams = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  Diff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g0 = GetCudaGraphStats(*runners[0]), g1 = GetCudaGraphStats(*runners[1]);
  const bool forked_ok = graphs ? g1.side_branches > 0 : g1.side_branches == 0;
  const bool pass = d.nonfinite == 0 && d.max_abs == 0 && d.differ == 0 && forked_ok && g0.side_branches == 0 &&
                    (!graphs || g1.replayed > 0);
  std::printf("[fixture] %s decode_streams graphs=%d: rows=%lld max_abs_diff=%.3e differing_logits=%lld "
              "nonfinite=%lld side_branches=%lld captured=%lld replayed=%lld (bit-identical expected)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.max_abs, (long long)d.differ, (long long)d.nonfinite,
              (long long)g1.side_branches, (long long)g1.captured, (long long)g1.replayed, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_EQ(d.max_abs, 0.0) << label;
  EXPECT_EQ(d.differ, 0) << label;
  EXPECT_EQ(g0.side_branches, 0) << label;
  if (graphs) {
    EXPECT_GT(g1.side_branches, 0) << label << ": no side branch was forked in a capture";
    EXPECT_GT(g1.replayed, 0) << label;
  } else {
    EXPECT_EQ(g1.side_branches, 0) << label << ": eager passes must not fork";
  }
}

void RunVariants(const std::string& label, const CudaRunnerOptions& base) {
  ForFusionsAndGraphs(label, base, CompareStreams);
}

TEST(CudaRunnerDecodeStreams, FixturesMatchWithoutStreams) {
  if (ForEachFixture({"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny", "v3_fp8_tiny"}, RunVariants) == 0)
    GTEST_SKIP() << "no fixture";
}

TEST(CudaRunnerDecodeStreams, PreciseMatchesWithoutStreams) {
  const std::string dir = DataDir() + "/v2_lite_tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no v2_lite_tiny";
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.precise_activations = true;
  o.profile = true;  // event-record nodes on the main stream around the branches
  for (bool graphs : {false, true}) CompareStreams("v2_lite_tiny precise profile", o, graphs);
}

TEST(CudaRunnerDecodeStreams, DummyV2LiteMatchesWithoutStreams) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // 1 dense + 2 MoE layers, bf16: q_proj (2048 x 3072) and the two shared experts' gate_up
  // (5632 x 2048) on cuBLASLt in the side branch.
  RunVariants("dummy_v2lite_3layers", DummyOptions(dir, 3, 5));
}

TEST(CudaRunnerDecodeStreams, DummyV3MatchesWithoutStreams) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // 3 dense (FP8) + 1 MoE layer: q_a with split K (the side branch's counters) beside kv_a with
  // split K (the main chain's), the shared expert's gate_up with split K beside the routed ones.
  RunVariants("dummy_v3_4layers", DummyOptions(dir, 4, 11));
}

}  // namespace
}  // namespace ds::cuda::test
