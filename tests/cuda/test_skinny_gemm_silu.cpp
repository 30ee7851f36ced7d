// SkinnyGemm with SiLU inputs (GroupedGemmParams::a_gate_up: the MoE down projection applying
// SiLU-and-mul to gate_up's fp32 output as it loads it) against SiluAndMul (silu_and_mul.h) then
// SkinnyGemm on its bf16 output: bit-identical, for bf16 and FP8 weights, fp32 and bf16 out,
// V2-Lite's down shape (N 2048, K 1408), V3's (N 7168, K 2048, FP8), an odd K (not a multiple of
// 8: the scalar load path), 1-8 rows spread over the groups, every kernel variant; large gate
// values (expf overflow to inf: silu -> -0 / 0) included. Also the argument check.
#include <cstring>

#include "backend/cuda/silu_and_mul.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(const char* name, bool fp8, int64_t E, int64_t N, int64_t K, int64_t rows_total, DTypeOut out_type) {
  // rows_total rows over the E groups, at most one per group (a decode step: a token picks an
  // expert at most once), in group order with empty groups between.
  std::vector<int32_t> off(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) off[e + 1] = off[e] + (e % 2 == 0 && off[e] < rows_total ? 1 : 0);
  const int64_t R = off[E], ldg = 2 * K + 4;
  auto gu = RandomNormal(R * ldg, 2.f);
  for (int64_t i = 0; i < R * ldg; i += 97) gu[i] = (i % 2 ? 120.f : -120.f);  // expf overflow / underflow
  Dev<float> dgu(gu);
  Dev<__nv_bfloat16> act(R * K);
  SiluAndMul({dgu.get(), ldg, act.get(), K, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, R, K, nullptr});
  const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
  Dev<__nv_bfloat16> wbf(fp8 ? std::vector<__nv_bfloat16>(1) : ToBf16(RandomNormal(E * N * K, 0.05f)));
  Dev<uint8_t> wq(fp8 ? RandomE4M3(E * N * K) : std::vector<uint8_t>(1));
  std::vector<float> sc = RandomF(E * nb * kb, 0.5f, 2.0f);
  for (auto& s : sc) s *= std::ldexp(1.f, -9);
  Dev<float> ws(sc);
  Dev<int32_t> doff(off);
  Dev<float> o32a(R * N), o32b(R * N);
  Dev<__nv_bfloat16> o16a(R * N), o16b(R * N);
  for (int v = 0; v < kSkinnyVariants; ++v) {
    SkinnyGemmParams sp{};
    GroupedGemmParams& g = sp.g;
    g.a = act.get(); g.lda = K; g.offsets = doff.get(); g.max_rows = R;
    g.w = fp8 ? static_cast<const void*>(wq.get()) : wbf.get(); g.w_fp8 = fp8; g.w_scales = fp8 ? ws.get() : nullptr;
    g.num_experts = E; g.N = N; g.K = K; g.ldo = N; g.out_type = out_type;
    g.out = out_type == DTypeOut::kF32 ? static_cast<void*>(o32a.get()) : o16a.get();
    sp.max_group_rows = 1; sp.max_active_groups = R; sp.variant = v; sp.splits = 1;
    o32a.Poison(); o16a.Poison(); o32b.Poison(); o16b.Poison();
    SkinnyGemm(sp);  // SiluAndMul's bf16 output
    SkinnyGemmParams sf = sp;
    sf.g.a = nullptr; sf.g.a_gate_up = dgu.get(); sf.g.lda = ldg;
    sf.g.out = out_type == DTypeOut::kF32 ? static_cast<void*>(o32b.get()) : o16b.get();
    SkinnyGemm(sf);  // SiLU in the loads
    std::vector<float> a, b;
    if (out_type == DTypeOut::kF32) { a = o32a.Download(); b = o32b.Download(); }
    else { a = FromBf16(o16a.Download()); b = FromBf16(o16b.Download()); }
    int64_t differ = 0, nonfinite = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      nonfinite += !std::isfinite(b[i]);
    }
    const std::string cas = std::string(name) + (fp8 ? "_fp8" : "_bf16") + "_rows" + std::to_string(R) +
                            (out_type == DTypeOut::kF32 ? "_f32" : "_bf16out") + "_v" + std::to_string(v);
    std::printf("[metric] op=skinny_gemm_silu_inputs case=%s n=%zu differing=%lld nonfinite=%lld%s\n", cas.c_str(),
                a.size(), (long long)differ, (long long)nonfinite, differ == 0 && nonfinite == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(differ, 0) << cas;
    EXPECT_EQ(nonfinite, 0) << cas;
  }
}

TEST(CudaSkinnyGemmSilu, MatchesSiluAndMulThenGemm) {
  for (int64_t rows : {1, 3, 6, 8}) {
    RunCase("v2lite_down", false, 16, 2048, 1408, rows, DTypeOut::kBF16);
    RunCase("v2lite_down", false, 16, 2048, 1408, rows, DTypeOut::kF32);
    RunCase("v3_down", true, 16, 7168, 2048, rows, DTypeOut::kBF16);
    RunCase("odd_k", false, 16, 96, 100, rows, DTypeOut::kF32);
    RunCase("odd_k", true, 16, 160, 200, rows, DTypeOut::kBF16);
  }
}

TEST(CudaSkinnyGemmSilu, RejectsMoreThanEightRowsAGroup) {
  Dev<float> gu(16 * 32);
  Dev<__nv_bfloat16> w(8 * 16);
  Dev<int32_t> off(std::vector<int32_t>{0, 16});
  Dev<float> out(16 * 8);
  SkinnyGemmParams sp{};
  sp.g.a_gate_up = gu.get(); sp.g.lda = 32; sp.g.offsets = off.get(); sp.g.max_rows = 16;
  sp.g.w = w.get(); sp.g.num_experts = 1; sp.g.N = 8; sp.g.K = 16; sp.g.out = out.get();
  sp.g.out_type = DTypeOut::kF32; sp.g.ldo = 8;
  sp.max_group_rows = 16;
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
