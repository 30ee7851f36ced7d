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

// Graphs off and on; with graphs the on runner must have replayed steps that fork side branches.
void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionBitIdentical(label, "decode_stream_priority", o, graphs, kSetPriority);
    if (graphs) {
      EXPECT_GT(stats[1].replayed, 0) << label;
      EXPECT_GT(stats[1].side_branches, 0) << label;
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
