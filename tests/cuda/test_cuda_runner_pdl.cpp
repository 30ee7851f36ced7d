// CudaRunnerOptions::pdl on the whole model: the runner's own kernels launched as programmatic
// dependents (launch.cuh: cudaLaunchAttributeProgrammaticStreamSerialization; each kernel waits
// with griddepcontrol.wait for its predecessor's completion before touching global memory).
// Same runner options with pdl off and on, the same dummy weights (same seed), RunFusionSchedule
// (runner_test_util.h: prefill, decode steps of 1..24 sequences, a mixed step), CUDA graphs off
// (eager PDL launches) and on (PDL launches captured as programmatic graph edges, replayed),
// with the decode fusions at their defaults and all on. PDL changes no arithmetic, so the
// logits must be bit-identical (max |diff| 0); also with profiling (event-record nodes in the
// graphs) and on the CUDA-core decode kernel. CudaPdl.* (test_pdl_launch.cpp) checks an op
// chain and the captured edges. Not yet run on the GPU (written without a device).
#include <array>
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

void ComparePdl(const std::string& label, CudaRunnerOptions o, bool graphs) {
  o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
  o.cuda_graphs = graphs;
  std::array<std::unique_ptr<ModelRunner>, 2> runners;  // 0: pdl off, 1: on
  MakeRunnerPair(o, [](CudaRunnerOptions& x, bool on) { x.pdl = on; }, &runners);
  ASSERT_TRUE(runners[0] && runners[1]);
  Diff d;
  RunFusionSchedule(runners, &d);
  const CudaGraphStats g1 = GetCudaGraphStats(*runners[1]);
  const bool pass = d.nonfinite == 0 && d.max_abs == 0 && d.differ == 0 && (!graphs || g1.replayed > 0);
  std::printf("[fixture] %s pdl graphs=%d: rows=%lld max_abs_diff=%.3e differing_logits=%lld nonfinite=%lld "
              "graphs captured=%lld replayed=%lld (bit-identical expected)%s\n",
              label.c_str(), graphs ? 1 : 0, (long long)d.rows, d.max_abs, (long long)d.differ,
              (long long)d.nonfinite, (long long)g1.captured, (long long)g1.replayed, pass ? " PASS" : " FAIL");
  EXPECT_EQ(d.nonfinite, 0) << label;
  EXPECT_EQ(d.max_abs, 0.0) << label;
  EXPECT_EQ(d.differ, 0) << label;
  if (graphs) { EXPECT_GT(g1.replayed, 0) << label; }
}

// The decode fusions: the defaults and all seven (PDL must not change their results either).
void RunVariants(const std::string& label, const CudaRunnerOptions& base) { ForFusionsAndGraphs(label, base, ComparePdl); }

TEST(CudaRunnerPdl, FixturesMatchWithoutPdl) {
  if (ForEachFixture({"v3_tiny", "v2_lite_tiny", "v3_mla512_tiny", "v3_fp8_tiny"}, RunVariants) == 0)
    GTEST_SKIP() << "no fixture";
}

// The CUDA-core MLA decode kernel (mla_decode.cu: split kernel + combine) on a fixture: the
// tensor-core paths are the defaults above.
TEST(CudaRunnerPdl, CudaCoreDecodeMatchesWithoutPdl) {
  const std::string dir = DataDir() + "/v3_mla512_tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no v3_mla512_tiny";
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.mla_decode_tensor_cores = false;
  for (bool graphs : {false, true}) ComparePdl("v3_mla512_tiny cuda-core decode", o, graphs);
}

// With profiling on, eager passes record events between phases and decode graphs are captured
// with external event-record nodes at the same marks: a PDL launch right after such a node has
// no kernel predecessor (capture should give it a plain edge). Both runners profile.
TEST(CudaRunnerPdl, ProfiledMatchesWithoutPdl) {
  const std::string dir = DataDir() + "/v2_lite_tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no v2_lite_tiny";
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.profile = true;
  for (bool graphs : {false, true}) ComparePdl("v2_lite_tiny profile", o, graphs);
}

TEST(CudaRunnerPdl, DummyV2LiteMatchesWithoutPdl) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  // 1 dense + 1 MoE layer: 16 heads, the warp-split tensor-core decode kernel (+ combine, and
  // with mla_decode_fused_combine its in-kernel merge below).
  RunVariants("dummy_v2lite_2layers", DummyOptions(dir, 2, 5));
  CudaRunnerOptions o = DummyOptions(dir, 2, 5);
  o.mla_decode_fused_combine = true;
  for (bool graphs : {false, true}) ComparePdl("dummy_v2lite_2layers fused_combine", o, graphs);
}

TEST(CudaRunnerPdl, DummyV3MatchesWithoutPdl) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  // 3 dense (FP8) + 1 MoE layer: 128 heads, the sm_90a wgmma + TMA decode kernel (+ combine);
  // FP8 skinny GEMMs with split K (their counters reset by the last split).
  RunVariants("dummy_v3_4layers", DummyOptions(dir, 4, 11));
}

}  // namespace
}  // namespace ds::cuda::test
