// RouterGemv (router_gemv.h: the MoE router logits at decode sizes, fp32) against the CPU
// router GEMM (ds::cpu::Gemm, what src/model/moe.cpp runs) and a double-precision reference, at
// the routers of DeepSeek-V3 (256 x 7168), V2-Lite (64 x 2048) and the fixtures' sizes, M = 1 ..
// 16 rows, strided rows; against cuBLASLt's GemmF32 (the runner's path above 16 rows); bitwise
// determinism across launches and independence of a row from the others (the graph buckets pad
// rows); the argument checks.
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/router_gemv.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

std::vector<double> RefDouble(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w, int64_t M,
                              int64_t N, int64_t K) {
  std::vector<double> y(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x[m * ldx + k]) * w[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

void RunCase(const char* name, int64_t N, int64_t K, int64_t M, int64_t ldx) {
  // Router inputs: the post-attention norm's output (~unit scale) and small weights.
  const auto x = RandomNormal(M * ldx, 1.f);
  const auto w = RandomNormal(N * K, 0.02f);
  Dev<float> dx(x), dw(w), dy(M * N), dy2(M * N), dyc(M * N);
  RouterGemv({dx.get(), ldx, dw.get(), K, dy.get(), N, M, N, K, nullptr});
  const auto got = dy.Download();
  std::vector<float> cpu(M * N);
  cpu::Gemm({x.data(), ldx, w.data(), K, cpu.data(), N, M, N, K, false});
  const auto ref = RefDouble(x, ldx, w, M, N, K);
  std::vector<float> reff(ref.begin(), ref.end());
  const std::string cas = std::string(name) + "_N" + std::to_string(N) + "_K" + std::to_string(K) + "_M" +
                          std::to_string(M) + "_ldx" + std::to_string(ldx);
  // fp32 sums of K products: ~sqrt(K) * 2^-24 relative; 2e-6 holds for K <= 7168 with margin.
  ExpectClose("router_gemv_vs_double", cas, got, reff, 2e-6);
  ExpectClose("router_gemv_vs_cpu", cas, got, cpu, 4e-6);
  GemmF32({dx.get(), ldx, dw.get(), K, dyc.get(), N, M, N, K, nullptr});
  ExpectClose("router_gemv_vs_cublas", cas, got, dyc.Download(), 4e-6);
  // Deterministic: a second launch gives the same bits.
  RouterGemv({dx.get(), ldx, dw.get(), K, dy2.get(), N, M, N, K, nullptr});
  const auto again = dy2.Download();
  int64_t differ = 0;
  for (int64_t i = 0; i < M * N; ++i) differ += !(again[i] == got[i]);
  std::printf("[metric] op=router_gemv_determinism case=%s differing=%lld%s\n", cas.c_str(), (long long)differ,
              differ == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(differ, 0) << cas;
  // Row 0 alone gives row 0's bits (a padded graph bucket adds rows after the real ones).
  if (M > 1) {
    Dev<float> dy1(N);
    RouterGemv({dx.get(), ldx, dw.get(), K, dy1.get(), N, 1, N, K, nullptr});
    const auto one = dy1.Download();
    int64_t d1 = 0;
    for (int64_t n = 0; n < N; ++n) d1 += !(one[n] == got[n]);
    EXPECT_EQ(d1, 0) << cas << ": row 0 depends on the other rows";
  }
}

TEST(CudaRouterGemv, MatchesCpu) {
  for (int64_t M : {1, 2, 5, 8, 16}) {
    RunCase("v3", 256, 7168, M, 7168);
    RunCase("v2lite", 64, 2048, M, 2048);
  }
  RunCase("fixture", 16, 256, 3, 256);
  RunCase("fixture_strided", 8, 132, 4, 136);  // K not a multiple of 128; padded rows
  RunCase("k4", 5, 4, 1, 4);                     // one float4 step
}

TEST(CudaRouterGemv, RejectsBadArguments) {
  Dev<float> x(64), w(64), y(16);
  EXPECT_THROW(RouterGemv({x.get(), 16, w.get(), 16, y.get(), 4, 0, 4, 16, nullptr}), CheckError);    // M = 0
  EXPECT_THROW(RouterGemv({x.get(), 16, w.get(), 16, y.get(), 4, 17, 4, 16, nullptr}), CheckError);   // M > 16
  EXPECT_THROW(RouterGemv({x.get(), 16, w.get(), 16, y.get(), 4, 1, 4, 14, nullptr}), CheckError);    // K % 4
  EXPECT_THROW(RouterGemv({x.get(), 18, w.get(), 16, y.get(), 4, 1, 4, 16, nullptr}), CheckError);    // ldx % 4
  EXPECT_THROW(RouterGemv({x.get() + 1, 16, w.get(), 16, y.get(), 4, 1, 4, 16, nullptr}), CheckError);  // align
  EXPECT_THROW(RouterGemv({nullptr, 16, w.get(), 16, y.get(), 4, 1, 4, 16, nullptr}), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
