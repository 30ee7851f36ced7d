// `dsinfer bench kernels`: the two-word command is dispatched (help works in every build) and a
// CPU-only build refuses it with a clear error instead of crashing.
#include <gtest/gtest.h>

#include "run_cmd.h"

#include <cstdio>
#include <string>

namespace {

using ds::test::RunCmd;


TEST(BenchKernels, HelpAndListing) {
  auto [rc, out] = RunCmd(std::string(DS_BINARY) + " bench kernels --help");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--quick"), std::string::npos) << out;
  EXPECT_NE(out.find("--budget-s"), std::string::npos) << out;
  auto [rc2, usage] = RunCmd(std::string(DS_BINARY) + " help");
  EXPECT_EQ(rc2, 0);
  EXPECT_NE(usage.find("bench kernels"), std::string::npos) << usage;
}

TEST(BenchKernels, CpuBuildSaysItNeedsCuda) {
  auto [vrc, version] = RunCmd(std::string(DS_BINARY) + " version");
  ASSERT_EQ(vrc, 0);
  if (version.find("cuda") != std::string::npos) GTEST_SKIP() << "CUDA build: the command would run on the GPU";
  const std::string dir = ::testing::TempDir();
  auto [rc, out] = RunCmd(std::string(DS_BINARY) + " bench kernels --quick --out " + dir);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("needs a CUDA build"), std::string::npos) << out;
}

}  // namespace
