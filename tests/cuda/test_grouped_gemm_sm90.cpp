// sm_90a grouped expert GEMM (grouped_gemm_sm90.h, CUTLASS wgmma kernels) vs a CPU reference
// on fresh random inputs:
//   - bf16 x bf16: cpu::Gemm per group on the bf16-rounded inputs (fp32 accumulation; only the
//     summation order differs);
//   - e4m3 x e4m3 with DeepSeek block scales: activations quantised on the GPU by
//     Fp8QuantizePerTokenGroup (token-major 1x128 scales, as the runner does), weights e4m3
//     with 128x128 scales; the reference dequantises exactly those codes and scales and runs
//     an fp32 GEMM (an exact emulation up to the tensor cores' accumulation order/precision).
// Shapes: DeepSeek-V2-Lite experts (hidden 2048, moe_intermediate 1408, 64 experts, top-6) and
// DeepSeek-V3 experts (7168, 2048; 256 experts over 1 / 8 / 32 ranks, top-8; the 256-expert
// case with N cut down to keep the host reference small), plus edge cases: empty groups, one
// group owning all rows, group sizes not multiples of 64 / 128, a single row. The output
// starts poisoned (NaN): rows outside the groups, the gap past N (ldo > N) and the spare rows
// must stay untouched; NaN/Inf in the result fail.
// Also GroupedGemm()'s dispatch to the sm_90a kernel (workspace given) vs the mma.sync kernel.
#include <cstdint>
#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/grouped_gemm_sm90.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case {
  std::string name;
  int64_t E, N, K;
  std::vector<int32_t> counts;  // rows of each group (size E)
  bool fp8;
  bool out_f32;
};

void RunSm90(const Case& c) {
  ASSERT_EQ(static_cast<int64_t>(c.counts.size()), c.E);
  const int64_t E = c.E, N = c.N, K = c.K, ldo = N + 8;  // ldo > N: the gap must stay untouched
  const int64_t kb = K / 128, nb = N / 128;
  std::vector<int32_t> off{0};
  for (int64_t e = 0; e < E; ++e) off.push_back(off.back() + c.counts[e]);
  const int64_t rows = off.back(), max_rows = rows + 40;  // spare rows past offsets[E]
  // Activations (bf16-rounded: the fp8 path quantises the permuted bf16 rows).
  const auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<int32_t> doff(off);
  std::vector<float> aref;  // what the GEMM sees, [max_rows, K]
  Dev<uint8_t> daq(c.fp8 ? max_rows * K : 1);
  Dev<float> das(c.fp8 ? max_rows * kb : 1);
  if (c.fp8) {
    Fp8QuantParams qp{da.get(), true, K, max_rows, K, 128, daq.get(), K, das.get(), ScaleLayout::kTokenMajor, nullptr};
    Fp8QuantizePerTokenGroup(qp);
    const auto q = daq.Download();
    const auto s = das.Download();
    aref.resize(max_rows * K);
    ParallelFor(max_rows, [&](int64_t r) {
      for (int64_t k = 0; k < K; ++k) aref[r * K + k] = Fp8E4M3ToF32(q[r * K + k]) * s[r * kb + k / 128];
    });
  } else {
    aref = a;
  }
  // Weights [E, N, K].
  std::vector<float> wdeq;
  std::vector<uint8_t> wq;
  std::vector<float> wscale;
  if (c.fp8) {
    wq.resize(E * N * K);
    wdeq.resize(E * N * K);
    wscale = RandomF(E * nb * kb, 0.5f, 2.0f);
    for (auto& v : wscale) v *= std::ldexp(1.f, -9);
    FillBlocks(wdeq, [](float& x, uint64_t& st) { x = (NextUniform01(st) * 2.f - 1.f) * 300.f; });
    ParallelFor(E * N, [&](int64_t en) {
      const int64_t e = en / N, n = en % N;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = en * K + k;
        wq[i] = F32ToFp8E4M3(wdeq[i]);
        wdeq[i] = Fp8E4M3ToF32(wq[i]) * wscale[(e * nb + n / 128) * kb + k / 128];
      }
    });
  } else {
    wdeq = RoundBf16Vec(RandomNormal(E * N * K, 0.05f));
  }
  Dev<__nv_bfloat16> dwb(c.fp8 ? std::vector<__nv_bfloat16>(1) : ToBf16(wdeq));
  Dev<uint8_t> dwq(c.fp8 ? wq : std::vector<uint8_t>(1));
  Dev<float> dws(c.fp8 ? wscale : std::vector<float>(1));
  Dev<float> dyf(c.out_f32 ? max_rows * ldo : 1);
  Dev<__nv_bfloat16> dyb(c.out_f32 ? 1 : max_rows * ldo);

  GroupedGemmSm90Params p{};
  p.input = c.fp8 ? Sm90GemmInput::kFp8 : Sm90GemmInput::kBf16;
  p.a = c.fp8 ? static_cast<const void*>(daq.get()) : da.get(); p.lda = K; p.a_scales = c.fp8 ? das.get() : nullptr;
  p.offsets = doff.get(); p.max_rows = max_rows;
  p.w = c.fp8 ? static_cast<const void*>(dwq.get()) : dwb.get(); p.w_scales = c.fp8 ? dws.get() : nullptr;
  p.num_experts = E; p.N = N; p.K = K;
  p.out = c.out_f32 ? static_cast<void*>(dyf.get()) : dyb.get(); p.out_type = c.out_f32 ? DTypeOut::kF32 : DTypeOut::kBF16;
  p.ldo = ldo;
  ASSERT_EQ(GroupedGemmSm90Unsupported(p), "");
  const size_t wsb = GroupedGemmSm90WorkspaceBytes(p.input, E, max_rows, N, K);
  Dev<uint8_t> ws(wsb);
  p.workspace = ws.get(); p.workspace_bytes = wsb;
  GroupedGemmSm90(p);
  DS_CUDA_CHECK(cudaGetLastError());

  std::vector<float> ref(rows * N, 0.f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = off[e + 1] - off[e];
    if (m > 0) cpu::Gemm({aref.data() + off[e] * K, K, wdeq.data() + e * N * K, K, ref.data() + off[e] * N, N, m, N, K, false});
  }
  const std::vector<float> full = c.out_f32 ? dyf.Download() : FromBf16(dyb.Download());
  std::vector<float> got(rows * N);
  int64_t stray = 0;
  for (int64_t r = 0; r < max_rows; ++r)
    for (int64_t n = 0; n < ldo; ++n) {
      const float v = full[r * ldo + n];
      if (r < rows && n < N) got[r * N + n] = v;
      else stray += std::isfinite(v) ? 1 : 0;
    }
  EXPECT_EQ(stray, 0) << c.name << ": wrote outside the groups' rows or past N";
  // bf16: fp32 accumulation in both, only the order differs (f32 out 2e-4); fp8: the tensor
  // cores accumulate each 128-wide K block (4 wgmma k32 steps) before the fp32 promotion with
  // both scales, at reduced internal precision (~2^-13; DeepSeek-V3 report 3.3.2): 1e-3.
  // bf16 output adds one rounding (2^-9 relative): 5e-3.
  const double rel = !c.out_f32 ? 5e-3 : c.fp8 ? 1e-3 : 2e-4;
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));
  const std::string cas = c.name + (c.out_f32 ? "_f32" : "_bf16");
  ExpectClose(c.fp8 ? "grouped_gemm_sm90_fp8" : "grouped_gemm_sm90_bf16", cas, got, ref, rel, 16 * rel * max_ref);
}

#define SKIP_WITHOUT_SM90() \
  if (!GroupedGemmSm90Available()) GTEST_SKIP() << "no sm_90a grouped GEMM (CUTLASS headers / sm_90 device)"

TEST(CudaGroupedGemmSm90, EdgeGroups) {
  SKIP_WITHOUT_SM90();
  for (bool fp8 : {false, true})
    for (bool f32 : {true, false}) {
      const std::string t = fp8 ? "fp8" : "bf16";
      // Empty groups (first, middle, last), sizes not multiples of 64 / 128, one > 2 tiles.
      RunSm90({t + "_uneven", 7, 384, 256, {0, 1, 77, 0, 300, 129, 0}, fp8, f32});
      // One group owns every row.
      RunSm90({t + "_one_owner", 5, 256, 512, {0, 0, 517, 0, 0}, fp8, f32});
      // A single row.
      RunSm90({t + "_single_row", 3, 256, 384, {0, 1, 0}, fp8, f32});
      // Every group empty: nothing is written.
      RunSm90({t + "_all_empty", 4, 128, 128, {0, 0, 0, 0}, fp8, f32});
    }
  // bf16 only: N and K multiples of 8 but not of 64 / 128 (TMA clips the partial tiles).
  RunSm90({"bf16_N200_K136", 4, 200, 136, {70, 0, 3, 131}, false, true});
  RunSm90({"bf16_N200_K136", 4, 200, 136, {70, 0, 3, 131}, false, false});
}

TEST(CudaGroupedGemmSm90, V2LiteExperts) {
  SKIP_WITHOUT_SM90();
  // DeepSeek-V2-Lite: 64 experts, top-6, hidden 2048, moe_intermediate 1408; 384 tokens.
  const auto cnt = RoutedCounts(384, 6, 64);
  RunSm90({"v2lite_w13", 64, 2 * 1408, 2048, cnt, false, true});
  RunSm90({"v2lite_w2", 64, 2048, 1408, cnt, false, false});
  RunSm90({"v2lite_w13", 64, 2 * 1408, 2048, cnt, true, true});
  RunSm90({"v2lite_w2", 64, 2048, 1408, cnt, true, false});
}

TEST(CudaGroupedGemmSm90, V3Experts) {
  SKIP_WITHOUT_SM90();
  // DeepSeek-V3: hidden 7168, moe_intermediate 2048, top-8 of 256 experts.
  // EP32: 8 local experts, 256 tokens per rank routed over all 256 experts (~64 rows each).
  const auto ep32 = RoutedCounts(2048, 8, 256);
  const std::vector<int32_t> ep32_local(ep32.begin(), ep32.begin() + 8);
  RunSm90({"v3_ep32_w13", 8, 4096, 7168, ep32_local, true, true});
  RunSm90({"v3_ep32_w2", 8, 7168, 2048, ep32_local, true, false});
  RunSm90({"v3_ep32_w13", 8, 4096, 7168, ep32_local, false, true});
  // EP8: 32 local experts.
  const std::vector<int32_t> ep8_local(ep32.begin(), ep32.begin() + 32);
  RunSm90({"v3_ep8_w2", 32, 7168, 2048, ep8_local, true, false});
  // EP1: all 256 experts (N cut to 256 to keep the host reference small; K = 7168 real).
  RunSm90({"v3_ep1_w13_n256", 256, 256, 7168, RoutedCounts(256, 8, 256), true, true});
  RunSm90({"v3_ep1_w2_n256", 256, 256, 2048, RoutedCounts(256, 8, 256), false, false});
}

TEST(CudaGroupedGemmSm90, DispatchFromGroupedGemm) {
  SKIP_WITHOUT_SM90();
  // GroupedGemm with a workspace takes the sm_90a kernel for bf16 weights; same result as the
  // mma.sync kernel (sm90 = false) up to summation order. 64-row padded segments as moe_permute
  // writes them.
  const int64_t E = 6, N = 512, K = 384;
  const std::vector<int32_t> off{0, 64, 64, 256, 320, 320, 448};
  const int64_t max_rows = off.back() + 64;
  const auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  const auto w = RoundBf16Vec(RandomNormal(E * N * K, 0.05f));
  Dev<__nv_bfloat16> da(ToBf16(a)), dw(ToBf16(w));
  Dev<int32_t> doff(off);
  Dev<float> y_sm90(max_rows * N), y_mma(max_rows * N);
  GroupedGemmParams p{};
  p.a = da.get(); p.lda = K; p.offsets = doff.get(); p.max_rows = max_rows; p.w = dw.get();
  p.num_experts = E; p.N = N; p.K = K; p.out_type = DTypeOut::kF32; p.ldo = N;
  const size_t wsb = GroupedGemmWorkspaceBytes(p);
  ASSERT_GT(wsb, 0u);
  Dev<uint8_t> ws(wsb);
  p.workspace = ws.get(); p.workspace_bytes = wsb; p.out = y_sm90.get();
  GroupedGemm(p);
  p.sm90 = false; p.out = y_mma.get();
  EXPECT_EQ(GroupedGemmWorkspaceBytes(p), 0u);
  GroupedGemm(p);
  const auto g1 = y_sm90.Download(), g2 = y_mma.Download();
  const std::vector<float> s1(g1.begin(), g1.begin() + off.back() * N), s2(g2.begin(), g2.begin() + off.back() * N);
  ExpectClose("grouped_gemm_dispatch", "sm90_vs_mma_sync", s1, s2, 2e-4);
  // No sm_90a path for FP8 weights (bf16 activations) or misaligned rows.
  GroupedGemmParams q = p;
  q.sm90 = true; q.w_fp8 = true;
  EXPECT_EQ(GroupedGemmWorkspaceBytes(q), 0u);
  q = p;
  q.sm90 = true; q.lda = K + 1;
  EXPECT_EQ(GroupedGemmWorkspaceBytes(q), 0u);
}

// Bad params get a reason (GroupedGemmSm90Unsupported) or a CheckError, never a launch. Only
// the pointers' alignment is looked at, so fake aligned addresses do.
TEST(CudaGroupedGemmSm90, UnsupportedParamsHaveAReason) {
  if (!GroupedGemmSm90Available()) GTEST_SKIP() << "needs CUTLASS and an sm_90 device";
  GroupedGemmSm90Params p{};
  p.input = Sm90GemmInput::kBf16;
  p.a = reinterpret_cast<const void*>(uintptr_t{1} << 12); p.lda = 256;
  p.offsets = reinterpret_cast<const int32_t*>(uintptr_t{2} << 12); p.max_rows = 64;
  p.w = reinterpret_cast<const void*>(uintptr_t{3} << 12);
  p.num_experts = 4; p.N = 128; p.K = 256;
  p.out = reinterpret_cast<void*>(uintptr_t{4} << 12); p.out_type = DTypeOut::kF32; p.ldo = 128;
  EXPECT_EQ(GroupedGemmSm90Unsupported(p), "");
  const auto reason = [&](auto edit) {
    GroupedGemmSm90Params q = p;
    edit(q);
    return GroupedGemmSm90Unsupported(q);
  };
  EXPECT_NE(reason([](auto& q) { q.lda = 128; }).find("lda < K"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.ldo = 64; }).find("ldo < N"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.offsets = nullptr; }).find("offsets"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.max_rows = -1; }).find("max_rows"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.num_experts = 0; }).find("empty shape"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.N = int64_t{1} << 32; q.ldo = q.N; }).find("2^31"), std::string::npos);
  EXPECT_NE(reason([](auto& q) { q.input = Sm90GemmInput::kFp8; q.K = 200; q.lda = 208; }).find("128x128"),
            std::string::npos);
  GroupedGemmSm90Params q = p;
  q.lda = 128;
  EXPECT_THROW(GroupedGemmSm90(q), CheckError);
  EXPECT_THROW(GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kBf16, 0, 64, 128, 256), CheckError);
  EXPECT_THROW(GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kBf16, 4, -1, 128, 256), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
