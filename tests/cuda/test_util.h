// Helpers for the CUDA op-equivalence tests: device buffers, random inputs, error metrics.
// Every comparison prints one "[metric]" line (op, case, errors, bound) so the GPU log records
// the measured errors, and fails on NaN/Inf or an error above the op's bound.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <algorithm>
#include <random>
#include <string>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "common/dtype.h"

namespace ds::cuda::test {

// Device copy of a host vector (freed on scope exit).
template <typename T>
class Dev {
 public:
  Dev() = default;
  explicit Dev(size_t n) : n_(n) { DS_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(1, n) * sizeof(T))); Poison(); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { Upload(h); }
  ~Dev() { if (p_) cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& h) {
    DS_CHECK(h.size() == n_);
    DS_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> Download() const {
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    DS_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // Fills with 0xFF bytes (NaN for floats), so unwritten outputs are caught.
  void Poison() { DS_CUDA_CHECK(cudaMemset(p_, 0xFF, std::max<size_t>(1, n_) * sizeof(T))); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Whether the current device is compute capability 9.0 (the sm_90a kernels' device); *why says
// what is missing otherwise. DS_SKIP_WITHOUT_SM90() skips the calling test without one.
inline bool Sm90Device(std::string* why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    *why = "no CUDA device";
    return false;
  }
  int dev = 0, major = 0, minor = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) {
    *why = "not an sm_90 device (the kernels are built for sm_90a)";
    return false;
  }
  return true;
}
#define DS_SKIP_WITHOUT_SM90()  \
  do {                          \
    std::string why_;           \
    if (!::ds::cuda::test::Sm90Device(&why_)) { \
      GTEST_SKIP() << why_;     \
    }                           \
  } while (0)

// One CUDA graph captured from record() on stream st (thread-local capture mode) and
// instantiated; Replay() launches it on st and waits for it. Freed on scope exit.
class CapturedGraph {
 public:
  template <class RecordFn>
  CapturedGraph(cudaStream_t st, RecordFn record) : st_(st) {
    DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    record();
    DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph_));
    DS_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void Replay() const {
    DS_CUDA_CHECK(cudaGraphLaunch(exec_, st_));
    DS_CUDA_CHECK(cudaStreamSynchronize(st_));
  }

 private:
  cudaStream_t st_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Microseconds per launch of a graph recorded with `launches` launches on stream st: one warm-up
// replay, then `replays` replays timed with CUDA events (each CapturedGraph::Replay synchronises).
inline double ReplayUs(const CapturedGraph& g, cudaStream_t st, int replays, int launches) {
  g.Replay();
  cudaEvent_t a, b;
  DS_CUDA_CHECK(cudaEventCreate(&a));
  DS_CUDA_CHECK(cudaEventCreate(&b));
  DS_CUDA_CHECK(cudaEventRecord(a, st));
  for (int r = 0; r < replays; ++r) g.Replay();
  DS_CUDA_CHECK(cudaEventRecord(b, st));
  DS_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  DS_CUDA_CHECK(cudaEventDestroy(a));
  DS_CUDA_CHECK(cudaEventDestroy(b));
  return 1000.0 * ms / (static_cast<double>(replays) * launches);
}

// Runs launch(stream) `launches` times (poison() before the last, so that only the last launch's
// outputs count): directly on the legacy default stream, or, with graph, as replays of one CUDA
// graph captured from a single launch on a new non-blocking stream (ops with device counters
// that the last block resets must give the same results on every replay).
template <class LaunchFn, class PoisonFn>
void LaunchRepeated(bool graph, int launches, LaunchFn launch, PoisonFn poison) {
  if (!graph) {
    for (int i = 0; i < launches; ++i) {
      if (i == launches - 1) {
        poison();
        DS_CUDA_CHECK(cudaDeviceSynchronize());
      }
      launch(cudaStream_t{nullptr});
    }
    return;
  }
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  {
    const CapturedGraph graph(st, [&] { launch(st); });
    for (int i = 0; i < launches; ++i) {
      if (i == launches - 1) {
        poison();  // cudaMemset / pageable copies on the legacy stream: done before the replay
        DS_CUDA_CHECK(cudaDeviceSynchronize());
      }
      graph.Replay();
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

// Elements of a and b whose bytes differ (-1 when the sizes differ): bit-identity checks.
template <typename T>
int64_t BitMismatches(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

// Random inputs. Every test draws from Rng(), reseeded at the test's start from a base seed and
// the test's full name (SeedListener below), so a test's inputs depend on nothing run before it:
// a failing test prints its base seed, and DS_TEST_SEED=<seed> with --gtest_filter=<that test>
// draws the same inputs again. Without DS_TEST_SEED the base seed is fresh each run (the suites
// sample new inputs every time; session 22 run 8's one-off 1.15e-4 in
// CudaMlaDecode.TensorCoresMixedLengths could not be reproduced for want of this).
inline uint64_t BaseSeed() {
  static const uint64_t seed = [] {
    const char* v = std::getenv("DS_TEST_SEED");
    if (v != nullptr && *v != '\0') return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}
inline std::mt19937_64& Rng() {
  static std::mt19937_64 rng(BaseSeed());
  return rng;
}
class SeedListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& t) override {
    Rng().seed(BaseSeed() ^ std::hash<std::string>{}(std::string(t.test_suite_name()) + "." + t.name()));
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result() != nullptr && t.result()->Failed())
      std::printf("[seed] %s.%s failed; its inputs come back with DS_TEST_SEED=%llu --gtest_filter=%s.%s\n",
                  t.test_suite_name(), t.name(), static_cast<unsigned long long>(BaseSeed()), t.test_suite_name(),
                  t.name());
  }
};
// Registered once per test binary (an inline variable: one instance across translation units).
inline const bool kSeedListenerRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
  return true;
}();

// Fast uniform/normal fills (xorshift64*, freshly seeded per call), filled in parallel
// (OpenMP) in 1 Mi-element blocks with per-block seeds: tensors at real DeepSeek-V3 shapes (a
// 129280 x 7168 table, 256 experts) would take most of a GPU test run's time serially.
inline uint64_t NextSeed() { return Rng()() | 1; }

// A test routing of n tokens over E experts: token t picks experts (t + j) * 3 % E, j < top_k
// (distinct while gcd(3, E) = 1 and top_k <= E; neighbouring tokens share top_k - 1 experts, so a
// grid over the active slots has empty ones), and the permutation as MoeRoutePermute orders the
// pairs (experts ascending, pairs in order, row_align 1): offsets [E + 1], pos [n * top_k] (the
// row of pair i) and src_row [n * top_k] (the token of row r).
struct TestRouting {
  std::vector<int32_t> ids, offsets, pos, src_row;
};
inline TestRouting MakeTestRouting(int64_t n, int top_k, int64_t E) {
  const int64_t m = n * top_k;
  TestRouting r{std::vector<int32_t>(m), std::vector<int32_t>(E + 1, 0), std::vector<int32_t>(m),
                std::vector<int32_t>(m)};
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < top_k; ++j) r.ids[t * top_k + j] = static_cast<int32_t>((t + j) * 3 % E);
  for (int64_t e = 0; e < E; ++e) {
    int c = 0;
    for (int32_t id : r.ids) c += id == e;
    r.offsets[e + 1] = r.offsets[e] + c;
  }
  for (int64_t i = 0; i < m; ++i) {
    int row = 0;
    for (int64_t k = 0; k < m; ++k) row += r.ids[k] < r.ids[i] || (r.ids[k] == r.ids[i] && k < i);
    r.pos[i] = row;
    r.src_row[row] = static_cast<int32_t>(i / top_k);
  }
  return r;
}

// Group sizes of `tokens` tokens routed to top_k distinct experts of E, uniformly at random
// (the load of one rank holding E experts): the grouped-GEMM tests' expert segments.
inline std::vector<int32_t> RoutedCounts(int64_t tokens, int64_t top_k, int64_t E) {
  std::vector<int32_t> cnt(E, 0), ids(E);
  for (int64_t e = 0; e < E; ++e) ids[e] = static_cast<int32_t>(e);
  std::mt19937_64 rng(NextSeed());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < std::min(top_k, E); ++j) {
      std::uniform_int_distribution<int64_t> d(j, E - 1);
      std::swap(ids[j], ids[d(rng)]);
      ++cnt[ids[j]];
    }
  return cnt;
}
inline uint64_t BlockSeed(uint64_t seed, int64_t block) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(block + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) | 1;
}
// Calls fn(i) for i in [0, n) on all cores (fn must write disjoint outputs).
template <typename Fn>
inline void ParallelFor(int64_t n, Fn fn) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i);
}
template <typename Fn>  // fn(x, state) per element, state = the block's xorshift64* state
inline void FillBlocks(std::vector<float>& v, Fn fn) {
  constexpr int64_t kBlock = 1 << 20;
  const uint64_t seed = NextSeed();
  const int64_t n = static_cast<int64_t>(v.size()), blocks = (n + kBlock - 1) / kBlock;
  ParallelFor(blocks, [&](int64_t b) {
    uint64_t st = BlockSeed(seed, b);
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) fn(v[i], st);
  });
}
inline float NextUniform01(uint64_t& s) {
  s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
  return static_cast<float>(((s * 0x2545F4914F6CDD1Dull) >> 40) * 0x1.0p-24);
}
inline std::vector<float> RandomF(size_t n, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  FillBlocks(v, [&](float& x, uint64_t& st) { x = lo + (hi - lo) * NextUniform01(st); });
  return v;
}
// n random e4m3 bytes: every finite code (the two NaN codes 0x7F / 0xFF become +-0), the top
// exponent bit cleared half of the time (more small and subnormal values). FP8 test weights.
inline std::vector<uint8_t> RandomE4M3(int64_t n) {
  std::vector<uint8_t> q(n);
  constexpr int64_t kBlock = 1 << 20;
  const uint64_t seed = NextSeed();
  ParallelFor((n + kBlock - 1) / kBlock, [&](int64_t b) {
    uint64_t st = BlockSeed(seed, b);
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      st ^= st >> 12; st ^= st << 25; st ^= st >> 27;
      const uint64_t r = st * 0x2545F4914F6CDD1Dull;
      uint8_t c = static_cast<uint8_t>(r >> 56);
      if ((r >> 40) & 1) c &= 0xbf;  // exponent <= 7 half of the time
      if ((c & 0x7f) == 0x7f) c &= 0x80;
      q[i] = c;
    }
  });
  return q;
}
// Approximately normal (Irwin-Hall of 4 uniforms, unit variance).
inline std::vector<float> RandomNormal(size_t n, float stddev = 1.f) {
  std::vector<float> v(n);
  FillBlocks(v, [&](float& x, uint64_t& st) {
    float acc = 0.f;
    for (int i = 0; i < 4; ++i) acc += NextUniform01(st);
    x = (acc - 2.f) * 1.7320508f * stddev;
  });
  return v;
}
// Rounds every value to bf16 (so CPU and GPU see the same inputs).
inline std::vector<float> RoundBf16Vec(std::vector<float> v) {
  ParallelFor(static_cast<int64_t>(v.size()), [&](int64_t i) { v[i] = RoundBf16(v[i]); });
  return v;
}
inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> o(v.size());
  ParallelFor(static_cast<int64_t>(v.size()), [&](int64_t i) {
    uint16_t b = F32ToBf16(v[i]);
    std::memcpy(static_cast<void*>(&o[i]), &b, 2);
  });
  return o;
}

// Random device expert weights [E, N, K] for the fused-versus-unfused comparisons (no host copy):
// bf16 from a normal of sd 0.05, or e4m3 (RandomE4M3) with [E, ceil(N / 128), ceil(K / 128)]
// block scales in [0.5, 2) x 2^-9; the other form is a one-element placeholder.
struct DeviceExpertWeights {
  DeviceExpertWeights(bool fp8_, int64_t E, int64_t N, int64_t K)
      : fp8(fp8_),
        bf16(fp8 ? std::vector<__nv_bfloat16>(1) : ToBf16(RandomNormal(E * N * K, 0.05f))),
        e4m3(fp8 ? RandomE4M3(E * N * K) : std::vector<uint8_t>(1)),
        scales(ScaledBy(RandomF(E * ((N + 127) / 128) * ((K + 127) / 128), 0.5f, 2.0f), std::ldexp(1.f, -9))) {}
  bool fp8;
  Dev<__nv_bfloat16> bf16;
  Dev<uint8_t> e4m3;
  Dev<float> scales;
  const void* w() const { return fp8 ? static_cast<const void*>(e4m3.get()) : bf16.get(); }
  const float* w_scales() const { return fp8 ? scales.get() : nullptr; }
  static std::vector<float> ScaledBy(std::vector<float> v, float f) {
    for (auto& x : v) x *= f;
    return v;
  }
};
inline std::vector<float> FromBf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> o(v.size());
  ParallelFor(static_cast<int64_t>(v.size()), [&](int64_t i) {
    uint16_t b;
    std::memcpy(&b, static_cast<const void*>(&v[i]), 2);
    o[i] = Bf16ToF32(b);
  });
  return o;
}

struct ErrStats {
  double max_abs = 0, rel_l2 = 0, max_ref = 0;
  int64_t bad = 0;  // NaN/Inf count in the output
};

inline ErrStats Compare(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrStats s;
  double num = 0, den = 0;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (!std::isfinite(got[i])) { ++s.bad; continue; }
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    s.max_abs = std::max(s.max_abs, d);
    s.max_ref = std::max(s.max_ref, std::fabs(double(ref[i])));
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

// Checks got vs ref: no NaN/Inf, rel_l2 <= rel_bound, and max_abs <= abs_bound (if > 0).
inline void ExpectClose(const std::string& op, const std::string& cas, const std::vector<float>& got,
                        const std::vector<float>& ref, double rel_bound, double abs_bound = 0) {
  ErrStats s = Compare(got, ref);
  std::printf("[metric] op=%s case=%s n=%zu rel_l2=%.3e max_abs=%.3e max_ref=%.3e nonfinite=%lld bound_rel=%.1e%s\n",
              op.c_str(), cas.c_str(), got.size(), s.rel_l2, s.max_abs, s.max_ref, (long long)s.bad, rel_bound,
              (s.bad == 0 && s.rel_l2 <= rel_bound && (abs_bound <= 0 || s.max_abs <= abs_bound)) ? " PASS" : " FAIL");
  EXPECT_EQ(s.bad, 0) << op << " " << cas << ": non-finite outputs";
  EXPECT_LE(s.rel_l2, rel_bound) << op << " " << cas;
  if (abs_bound > 0) { EXPECT_LE(s.max_abs, abs_bound) << op << " " << cas; }
}


// A paged latent cache for MLA decode tests: sequences with context lengths `ctx` and query
// lengths `qlen` over `bs`-token blocks in shuffled order (3 spare blocks), each cache row
// `row` values (bf16-rounded normals); every row no sequence may read is NaN, so a kernel that
// reads past a context fails its NaN check. Draws from Rng() in a fixed order (shuffle, cache).
struct PagedDecodeCase {
  int64_t S = 0, T = 0, max_blocks = 0, total_blocks = 0, max_ctx = 0, total_ctx = 0, max_q = 0, num_blocks = 0;
  std::vector<int32_t> table;  // [S, max_blocks], -1 past a sequence's blocks
  std::vector<int32_t> qs;     // [S + 1] query starts
  std::vector<float> cache;    // [num_blocks * bs, row]
};
inline PagedDecodeCase MakePagedDecodeCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen,
                                           int64_t bs, int64_t row) {
  PagedDecodeCase c;
  c.S = static_cast<int64_t>(ctx.size());
  for (auto n : ctx) {
    c.max_blocks = std::max<int64_t>(c.max_blocks, (n + bs - 1) / bs);
    c.total_blocks += (n + bs - 1) / bs;
    c.max_ctx = std::max<int64_t>(c.max_ctx, n);
    c.total_ctx += n;
  }
  for (auto q : qlen) c.max_q = std::max<int64_t>(c.max_q, q);
  c.num_blocks = c.total_blocks + 3;
  std::vector<int32_t> perm(c.num_blocks);
  for (int64_t i = 0; i < c.num_blocks; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), Rng());
  c.table.assign(c.S * c.max_blocks, -1);
  c.qs = {0};
  int64_t used = 0;
  for (int64_t s = 0; s < c.S; ++s) {
    for (int64_t b = 0; b < (ctx[s] + bs - 1) / bs; ++b) c.table[s * c.max_blocks + b] = perm[used++];
    c.qs.push_back(c.qs.back() + qlen[s]);
  }
  c.T = c.qs.back();
  c.cache = RoundBf16Vec(RandomNormal(c.num_blocks * bs * row));
  std::vector<char> readable(c.num_blocks * bs, 0);
  for (int64_t s = 0; s < c.S; ++s)
    for (int64_t k = 0; k < ctx[s]; ++k) readable[c.table[s * c.max_blocks + k / bs] * bs + k % bs] = 1;
  for (int64_t r = 0; r < c.num_blocks * bs; ++r)
    if (!readable[r])
      std::fill(c.cache.begin() + r * row, c.cache.begin() + (r + 1) * row, std::numeric_limits<float>::quiet_NaN());
  return c;
}

}  // namespace ds::cuda::test
