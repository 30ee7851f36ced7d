// Data-parallel serving puts rank r's CUDA runner on GPU r, all in one process: the runner is
// made on the main thread and driven from the rank's engine thread. These tests (skipped with
// fewer than 2 devices) check that a runner on device 1, called from a fresh thread (whose
// current device is 0), computes what a runner on device 0 computes: the runner makes its own
// device current in Forward, and the per-device state behind the kernels (dynamic shared
// memory attributes of the MLA decode / grouped GEMM kernels, the cuBLASLt workspace) is set
// up on each device rather than once per process.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "runner_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// A 300-token and a 70-token prompt, then two decode steps of both (the first captures the
// decode graph, the second replays it): the last-position logits of every pass, in order.
std::vector<float> RunSteps(ModelRunner& m) {
  const int64_t V = m.config().vocab_size;
  std::vector<float> all;
  std::vector<int> ctx = {0, 0};
  const std::vector<int> first_block = {0, 8};
  auto pass = [&](const std::vector<int>& n_new) {
    ForwardBatch b;
    b.max_blocks = 8;
    b.query_start = {0};
    for (size_t s = 0; s < n_new.size(); ++s) {
      for (int i = 0; i < n_new[s]; ++i) {
        b.token_ids.push_back(static_cast<int32_t>((ctx[s] + i * 7919 + 13 * s) % V));
        b.positions.push_back(ctx[s] + i);
      }
      ctx[s] += n_new[s];
      b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.context_lens.push_back(ctx[s]);
      for (int k = 0; k < 8; ++k) b.block_tables.push_back(first_block[s] + k);
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    }
    ForwardOutput out;
    const Status st = m.Forward(b, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    all.insert(all.end(), out.logits.begin(), out.logits.end());
  };
  pass({300, 70});
  pass({1, 1});
  pass({1, 1});
  pass({1, 1});
  return all;
}

TEST(CudaMultiDevice, RunnerOnDevice1FromAnotherThreadMatchesDevice0) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "needs 2 CUDA devices (found " << ndev << ")";
  }
  const std::string dir = DataDir() + "/deepseek-v3";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
  CudaRunnerOptions o = DummyV3Options(4, 64, 7);  // 3 dense + 1 MoE layer
  std::vector<float> ref, got;
  {
    o.device = 0;
    auto r0 = CreateCudaModelRunner(o);
    ASSERT_TRUE(r0.ok()) << r0.status().ToString();
    std::thread t([&] { ref = RunSteps(**r0); });  // warms device 0's per-device state first
    t.join();
  }
  {
    o.device = 1;
    auto r1 = CreateCudaModelRunner(o);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the creating thread moves on, as serve's main thread does
    std::thread t([&] { got = RunSteps(**r1); });  // a fresh thread: current device 0
    t.join();
    int cur = -1;
    ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
    EXPECT_EQ(cur, 0);
  }
  ASSERT_EQ(ref.size(), got.size());
  ASSERT_FALSE(ref.empty());
  double ab = 0, aa = 0, bb = 0, max_diff = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    bad += !std::isfinite(got[i]);
    ab += double(ref[i]) * got[i];
    aa += double(ref[i]) * ref[i];
    bb += double(got[i]) * got[i];
    max_diff = std::max(max_diff, std::fabs(double(ref[i]) - got[i]));
  }
  const double cosine = ab / std::sqrt(aa * bb + 1e-300);
  std::printf("[multi-device] dummy V3 4 layers, device 1 (other thread) vs device 0: cosine %.9f max|diff| %.3g "
              "nonfinite %lld\n",
              cosine, max_diff, static_cast<long long>(bad));
  EXPECT_EQ(bad, 0);
  // Same GPU model, same deterministic kernels and plans: expected bitwise equal; bounded
  // loosely so that a different cuBLASLt heuristic pick cannot fail it.
  EXPECT_GE(cosine, 0.9999);
}

}  // namespace
}  // namespace ds::cuda::test
