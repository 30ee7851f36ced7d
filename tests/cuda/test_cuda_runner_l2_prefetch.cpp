// CudaRunnerOptions::l2_prefetch on the whole model: L2 prefetches of upcoming weights on a
// third stream of the decode graphs (l2_prefetch.h). A cache hint: every logit must be
// bit-identical with it on and off, graphs off (the path never runs: eager passes do not
// prefetch) and on (it must run), on dummy V2-Lite, dummy V3 and the fixtures.
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

const auto kSetPrefetch = [](CudaRunnerOptions& x, bool on) { x.l2_prefetch = on ? 15 : 0; };

void CompareBitIdentical(const std::string& label, const CudaRunnerOptions& o, bool runs) {
  for (bool graphs : {false, true}) {
    const auto stats = CompareOptionBitIdentical(label, "l2_prefetch", o, graphs, kSetPrefetch);
    std::printf("[fixture] %s l2_prefetch graphs=%d: %lld prefetch launches captured (off runner %lld)\n",
                label.c_str(), graphs ? 1 : 0, (long long)stats[1].l2_prefetches, (long long)stats[0].l2_prefetches);
    EXPECT_EQ(stats[0].l2_prefetches, 0) << label;
    if (!graphs) { EXPECT_EQ(stats[1].l2_prefetches, 0) << label << ": eager passes must not prefetch"; }
    if (graphs && runs) { EXPECT_GT(stats[1].l2_prefetches, 0) << label << ": l2_prefetch did not run"; }
  }
}

TEST(CudaRunnerL2Prefetch, DummyV2LiteBitIdentical) {
  const std::string dir = ConfigDir("deepseek-v2-lite");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v2-lite config";
  CompareBitIdentical("dummy_v2lite_3layers", DummyOptions(dir, 3, 5), true);
}

TEST(CudaRunnerL2Prefetch, DummyV3BitIdentical) {
  const std::string dir = ConfigDir("deepseek-v3");
  if (dir.empty()) GTEST_SKIP() << "no deepseek-v3 config";
  CompareBitIdentical("dummy_v3_4layers", DummyOptions(dir, 4, 11), true);
}

TEST(CudaRunnerL2Prefetch, FixturesBitIdentical) {
  const int ran = ForEachFixture({"v2_lite_tiny", "v3_tiny"}, [](const std::string& name, const CudaRunnerOptions& o) {
    CompareBitIdentical(name, o, true);
  });
  if (ran == 0) GTEST_SKIP() << "no fixture";
}

}  // namespace
}  // namespace ds::cuda::test
