// Grouped expert GEMM (grouped_gemm.h) on its own, vs ds::cpu::Gemm per expert segment:
// uneven and empty 64-row-aligned segments, many experts, real DeepSeek-V2-Lite / V3 expert
// shapes, N not a multiple of 128 (partial scale blocks), K with a partial k tile, fp32 and bf16
// outputs, both kernels (the mma.sync one and the WMMA one it replaces, through force_wmma),
// and the fallback shapes the mma.sync kernel refuses. Also checks that nothing is written
// outside the segments' rows or past N inside a row (the output starts poisoned with NaN).
#include "backend/cpu/ops.h"
#include "backend/cuda/grouped_gemm.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case {
  const char* name;
  int64_t E, N, K;
  std::vector<int32_t> seg_slots;  // segment length of expert e in 64-row slots (cycled over E)
  bool fp8;
  float w_std = 0.05f;             // bf16 weights; fp8: stddev of the pre-quantisation values
  int64_t out_shift = 0;           // output starts this many elements into its buffer (alignment)
};

void RunGg(const Case& c, bool out_f32, bool force_wmma) {
  const int64_t E = c.E, N = c.N, K = c.K, ldo = N + 6;  // ldo > N: the gap must stay untouched
  std::vector<int32_t> off{0};
  for (int64_t e = 0; e < E; ++e) off.push_back(off.back() + 64 * c.seg_slots[e % c.seg_slots.size()]);
  const int64_t rows = off.back(), max_rows = rows + 64;  // 64 spare rows past offsets[E]
  auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128;
  std::vector<float> wdeq(E * N * K), wscale;
  std::vector<uint8_t> wq;
  if (c.fp8) {
    wq.resize(E * N * K);
    auto r = RandomNormal(wq.size(), c.w_std);
    ParallelFor(static_cast<int64_t>(wq.size()), [&](int64_t i) { wq[i] = F32ToFp8E4M3(r[i]); });
    wscale = RandomF(E * nb * kb, 0.5f, 2.0f);
    for (auto& v : wscale) v *= std::ldexp(1.f, -9);
    ParallelFor(E * N, [&](int64_t en) {
      const int64_t e = en / N, n = en % N;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = en * K + k;
        wdeq[i] = Fp8E4M3ToF32(wq[i]) * wscale[(e * nb + n / 128) * kb + k / 128];
      }
    });
  } else {
    wdeq = RoundBf16Vec(RandomNormal(E * N * K, c.w_std));
  }
  std::vector<float> ref(rows * N, 0.f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = off[e + 1] - off[e];
    if (m > 0) cpu::Gemm({a.data() + off[e] * K, K, wdeq.data() + e * N * K, K, ref.data() + off[e] * N, N, m, N, K, false});
  }
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<int32_t> doff(off);
  Dev<__nv_bfloat16> dwb(c.fp8 ? std::vector<__nv_bfloat16>(1) : ToBf16(wdeq));
  Dev<uint8_t> dwq(c.fp8 ? wq : std::vector<uint8_t>(1));
  Dev<float> dws(c.fp8 ? wscale : std::vector<float>(1));
  const int64_t sh = c.out_shift;
  Dev<float> dyf(out_f32 ? max_rows * ldo + sh : 1);
  Dev<__nv_bfloat16> dyb(out_f32 ? 1 : max_rows * ldo + sh);
  GroupedGemmParams p{};
  p.a = da.get(); p.lda = K; p.offsets = doff.get(); p.max_rows = max_rows;
  p.w = c.fp8 ? static_cast<const void*>(dwq.get()) : dwb.get(); p.w_fp8 = c.fp8; p.w_scales = c.fp8 ? dws.get() : nullptr;
  p.num_experts = E; p.N = N; p.K = K;
  p.out = out_f32 ? static_cast<void*>(dyf.get() + sh) : dyb.get() + sh; p.out_type = out_f32 ? DTypeOut::kF32 : DTypeOut::kBF16;
  p.ldo = ldo; p.force_wmma = force_wmma;
  GroupedGemm(p);
  const std::vector<float> full = out_f32 ? dyf.Download() : FromBf16(dyb.Download());
  std::vector<float> got(rows * N);
  int64_t stray = 0;  // finite values where nothing may be written
  for (int64_t i = 0; i < sh; ++i) stray += std::isfinite(full[i]) ? 1 : 0;
  for (int64_t r = 0; r < max_rows; ++r)
    for (int64_t n = 0; n < ldo; ++n) {
      const float v = full[sh + r * ldo + n];
      if (r < rows && n < N) got[r * N + n] = v;
      else stray += std::isfinite(v) ? 1 : 0;
    }
  EXPECT_EQ(stray, 0) << c.name << ": wrote outside the segments or past N";
  // The mma.sync kernel converts e4m3 exactly and scales in fp32: only fp32 summation order
  // differs from the CPU (bound 1e-4 with fp32 output); the WMMA kernel rounds w * scale to bf16
  // (2^-9 relative per weight, bound 5e-3); bf16 output adds one rounding (2^-9): bound 5e-3.
  // fp8 with K % 16 != 0 takes the WMMA kernel even without force_wmma (GPU run 2026-11-29:
  // fp8_N200_K200_f32_auto measured 1.67e-3 against a wrongly exact 1e-4 bound).
  const bool exact = !c.fp8 || (!force_wmma && K % 16 == 0);
  const double rel = out_f32 && exact ? 1e-4 : 5e-3;
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));
  const std::string cas = std::string(c.name) + (out_f32 ? "_f32" : "_bf16") + (force_wmma ? "_wmma" : "_auto");
  ExpectClose(c.fp8 ? "grouped_gemm_fp8" : "grouped_gemm_bf16", cas, got, ref, rel, 8 * rel * max_ref);
}

TEST(CudaGroupedGemm, ManyExpertsUnevenSegments) {
  // 256 experts (V3's count), empty, single-slot (one 64-row half tile) and multi-tile segments;
  // N = 320: the last 128-column tile and scale block are partial.
  const std::vector<int32_t> slots{1, 0, 3, 2, 0, 0, 5, 1, 4, 0, 2, 7};
  for (bool fp8 : {false, true})
    for (bool f32 : {true, false}) RunGg({"E256_N320_K256", 256, 320, 256, slots, fp8, fp8 ? 100.f : 0.05f}, f32, false);
  RunGg({"E256_N320_K256", 256, 320, 256, slots, true, 100.f}, true, true);
  RunGg({"E256_N320_K256", 256, 320, 256, slots, false}, true, true);
}

TEST(CudaGroupedGemm, OddShapes) {
  const std::vector<int32_t> slots{3, 0, 1, 2};
  // bf16 K = 136: a partial 64-wide k tile (mma.sync path); N odd: single-element stores.
  RunGg({"bf16_N203_K136", 5, 203, 136, slots, false}, true, false);
  RunGg({"bf16_N203_K136", 5, 203, 136, slots, false}, false, false);
  // fp8 K = 200 (not a multiple of 16): the WMMA fallback; K = 208: mma.sync with a partial
  // 128-wide scale block in K and N = 200 in N.
  RunGg({"fp8_N200_K200", 5, 200, 200, slots, true, 100.f}, true, false);
  RunGg({"fp8_N200_K208", 5, 200, 208, slots, true, 100.f}, true, false);
  RunGg({"fp8_N200_K208", 5, 200, 208, slots, true, 100.f}, false, false);
  // Output one element into its buffer: pair stores would be misaligned, single stores instead.
  RunGg({"bf16_N256_K128_shift1", 3, 256, 128, slots, false, 0.05f, 1}, true, false);
  RunGg({"fp8_N256_K128_shift1", 3, 256, 128, slots, true, 100.f, 1}, false, false);
  // bf16 K = 100 (not a multiple of 8): the WMMA fallback.
  RunGg({"bf16_N96_K100", 3, 96, 100, slots, false}, true, false);
}

TEST(CudaGroupedGemm, Fp8SubnormalAndZeroWeights) {
  // Most e4m3 values subnormal (|w| < 2^-6) or zero: guards the exact in-register conversion.
  RunGg({"fp8_subnormal_N256_K256", 3, 256, 256, {2, 1, 3}, true, 0.01f}, true, false);
}

TEST(CudaGroupedGemm, RealShapes) {
  // DeepSeek-V2-Lite experts (bf16): gate_up N 2816 K 2048, down N 2048 K 1408 (K = 11 x 128).
  RunGg({"v2lite_gate_up", 4, 2816, 2048, {3, 0, 2, 5}, false}, false, false);
  RunGg({"v2lite_down", 4, 2048, 1408, {1, 4, 0, 2}, false}, true, false);
  // DeepSeek-V3 experts (fp8 + 128x128 scales): gate_up N 4096 K 7168, down N 7168 K 2048.
  RunGg({"v3_gate_up", 2, 4096, 7168, {3, 2}, true, 100.f}, true, false);
  RunGg({"v3_down", 3, 7168, 2048, {2, 0, 3}, true, 100.f}, false, false);
}

}  // namespace
}  // namespace ds::cuda::test
