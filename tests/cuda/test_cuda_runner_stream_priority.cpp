// CudaRunnerOptions::decode_stream_priority on the whole model: the main stream above the side
// stream, decode graphs instantiated with per-node priorities. Scheduling only, so every logit
// must be bit-identical with it on and off: dummy V2-Lite and dummy V3, CUDA graphs off and on
// (with graphs on, the replayed steps fork side branches in both runners).
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetPriority = [](CudaRunnerOptions& x, bool on) { x.decode_stream_priority = on; };

void CompareBitIdentical(const std::string& label, CudaRunnerOptions o) {
  for (bool graphs : {false, true}) {
    o.num_kv_blocks = kFusionSeqs * kFusionMaxBlocks;
    o.cuda_graphs = graphs;
    std::array<std::unique_ptr<ModelRunner>, 2> runners;
    MakeRunnerPair(o, kSetPriority, &runners);
    ASSERT_TRUE(runners[0] && runners[1]);
    RowDiff d;
    RunFusionSchedule(runners, &d);
    const CudaGraphStats on = GetCudaGraphStats(*runners[1]);
    const bool ok = d.identical_rows == d.rows && d.nonfinite == 0 && (!graphs || (on.replayed > 0 && on.side_branches > 0));
    std::printf("[fixture] %s decode_stream_priority graphs=%d: rows=%lld identical_rows=%lld nonfinite=%lld "
                "replayed=%lld side_branches=%lld%s\n",
                label.c_str(), graphs ? 1 : 0, (long long)d.rows, (long long)d.identical_rows, (long long)d.nonfinite,
                (long long)on.replayed, (long long)on.side_branches, ok ? " PASS" : " FAIL");
    EXPECT_EQ(d.identical_rows, d.rows) << label << ": stream priorities must not change any bit";
    EXPECT_EQ(d.nonfinite, 0) << label;
    if (graphs) {
      EXPECT_GT(on.replayed, 0) << label;
      EXPECT_GT(on.side_branches, 0) << label;
    }
  }
}

TEST(CudaRunnerStreamPriority, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5));
}

TEST(CudaRunnerStreamPriority, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11));
}

}  // namespace
}  // namespace ds::cuda::test
