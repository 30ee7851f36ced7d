// L2Prefetch (l2_prefetch.h): a cache hint with no value to compare against a CPU op. It must
// leave every byte as it was (also at unaligned range ends, inside a CUDA graph, with more
// chunks than the grid has threads), launch nothing for empty ranges, and reject bad ranges.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/l2_prefetch.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> h(n);
  for (auto& b : h) b = static_cast<uint8_t>(rng());
  return h;
}

// Bytes that differ between two copies.
int64_t Changed(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t c = 0;
  for (size_t i = 0; i < a.size(); ++i) c += a[i] != b[i];
  return c;
}

TEST(CudaL2Prefetch, LeavesMemoryUnchanged) {
  // 48 MB: ~1,500 chunks of 32 KB (more than one pass of the 64 x 128 thread grid), and ranges
  // that start and end off 16-byte boundaries.
  const size_t n = size_t{48} << 20;
  const std::vector<uint8_t> h = RandomBytes(n, 7);
  Dev<uint8_t> d(h);
  L2PrefetchParams p;
  ASSERT_TRUE(AddL2PrefetchRange(p, d.get() + 3, (int64_t{40} << 20) - 5));
  ASSERT_TRUE(AddL2PrefetchRange(p, d.get() + (size_t{40} << 20) + 9, 4093));
  ASSERT_TRUE(AddL2PrefetchRange(p, d.get() + (size_t{41} << 20), 7));  // no aligned 16-byte block
  ASSERT_TRUE(AddL2PrefetchRange(p, d.get(), 0));                      // skipped
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(L2PrefetchBytes(p), (int64_t{40} << 20) - 5 + 4093 + 7);
  for (int rep = 0; rep < 3; ++rep) L2Prefetch(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  const int64_t changed = Changed(h, d.Download());
  std::printf("[metric] op=l2_prefetch case=48MB_3ranges changed_bytes=%lld %s\n", (long long)changed,
              changed == 0 ? "PASS" : "FAIL");
  EXPECT_EQ(changed, 0);
}

TEST(CudaL2Prefetch, InsideAGraph) {
  const size_t n = size_t{4} << 20;
  const std::vector<uint8_t> h = RandomBytes(n, 11);
  Dev<uint8_t> d(h);
  cudaStream_t s = nullptr;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  L2PrefetchParams p;
  ASSERT_TRUE(AddL2PrefetchRange(p, d.get(), static_cast<int64_t>(n)));
  p.stream = s;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  DS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  L2Prefetch(p);
  DS_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  DS_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 5; ++rep) DS_CUDA_CHECK(cudaGraphLaunch(ge, s));
  DS_CUDA_CHECK(cudaStreamSynchronize(s));
  size_t nodes = 0;
  DS_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT_EQ(nodes, 1u);  // one kernel node
  EXPECT_EQ(Changed(h, d.Download()), 0);
  DS_CUDA_CHECK(cudaGraphExecDestroy(ge));
  DS_CUDA_CHECK(cudaGraphDestroy(g));
  DS_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(CudaL2Prefetch, FullParamsAndBadRanges) {
  Dev<uint8_t> d(1 << 20);
  L2PrefetchParams p;
  for (int i = 0; i < kL2PrefetchMaxRanges; ++i) EXPECT_TRUE(AddL2PrefetchRange(p, d.get() + i * 1024, 1024));
  EXPECT_FALSE(AddL2PrefetchRange(p, d.get(), 1024));  // full: unchanged
  EXPECT_EQ(p.n, kL2PrefetchMaxRanges);
  L2Prefetch(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  L2PrefetchParams bad;
  bad.n = kL2PrefetchMaxRanges + 1;
  EXPECT_THROW(L2Prefetch(bad), CheckError);
  bad.n = 1;
  bad.ptr[0] = d.get();
  bad.bytes[0] = -16;
  EXPECT_THROW(L2Prefetch(bad), CheckError);
  bad.ptr[0] = nullptr;
  bad.bytes[0] = 64;
  EXPECT_THROW(L2Prefetch(bad), CheckError);
  L2PrefetchParams empty;  // nothing to prefetch: no launch, no error
  L2Prefetch(empty);
  DS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace ds::cuda::test
