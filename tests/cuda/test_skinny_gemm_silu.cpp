// SkinnyGemm with SiLU-and-mul in the epilogue (skinny_gemm.h, SkinnyGemmParams::silu_pair: each
// block takes 16 gate rows and the same 16 up rows and writes bf16 act = silu(gate) * up) against
// SkinnyGemm with fp32 output then SiluAndMul with bf16 output: every act bit identical. V2-Lite's
// routed gate_up shape (bf16, I = 1408, K = 2048, 6 experts a token) and an FP8 one with block
// scales (V3's I = 2048, K = 2048, 8 experts a token; and I = 1360, whose up tiles start inside
// a 128-row scale block), 16 experts each (the per-expert layout is
// what matters; fewer keep the host-side weights small), 1 to 8 tokens, the token rows read in
// place or gathered by a_rows (MoeRouterRoute's src_row), every two-tile variant, repeated
// launches and CUDA-graph replays; the argument checks.
#include <string>

#include "backend/cuda/silu_and_mul.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Shape { const char* name; bool fp8; int64_t E, I, K; int top_k; };

// n tokens routed by MakeTestRouting (test_util.h); gathered: the GEMM reads token rows of x
// through a_rows (its src_row) instead of a permuted copy. Returns the variants that ran.
int RunCase(const Shape& sh, int64_t n, bool gathered, bool graph) {
  const int64_t E = sh.E, I = sh.I, N = 2 * I, K = sh.K, m = n * sh.top_k;
  const TestRouting rt = MakeTestRouting(n, sh.top_k, E);
  const std::vector<int32_t>& off = rt.offsets;
  const std::vector<int32_t>& src = rt.src_row;
  // x: the token rows [n, K]; xp: the permuted copy [m, K] (the ungathered form's input).
  const auto x = RoundBf16Vec(RandomNormal(n * K));
  std::vector<float> xp(m * K);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t k = 0; k < K; ++k) xp[r * K + k] = x[src[r] * K + k];
  Dev<__nv_bfloat16> dx(ToBf16(x)), dxp(ToBf16(xp));
  const DeviceExpertWeights wt(sh.fp8, E, N, K);
  Dev<int32_t> doff(off), dsrc(src);
  int ran = 0;
  for (int v = 0; v < kSkinnyVariants; ++v) {
    SkinnyGemmParams sp{};
    GroupedGemmParams& g = sp.g;
    g.a = gathered ? dx.get() : dxp.get(); g.a_rows = gathered ? dsrc.get() : nullptr;
    g.lda = K; g.offsets = doff.get(); g.max_rows = m;
    g.w = wt.w(); g.w_fp8 = sh.fp8; g.w_scales = wt.w_scales();
    g.num_experts = E; g.N = N; g.K = K;
    sp.max_group_rows = n; sp.max_active_groups = std::min<int64_t>(E, m); sp.variant = v; sp.splits = 1;
    // Reference: fp32 gate_up, then SiluAndMul to bf16.
    Dev<float> gu(m * N);
    Dev<__nv_bfloat16> act_ref(m * I), act(m * I);
    g.out = gu.get(); g.out_type = DTypeOut::kF32; g.ldo = N;
    SkinnyGemm(sp);
    SiluAndMul({gu.get(), N, act_ref.get(), I, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, m, I,
                nullptr});
    SkinnyGemmParams sf = sp;
    sf.g.out = act.get(); sf.g.out_type = DTypeOut::kBF16; sf.g.ldo = I;
    sf.silu_pair = true;
    if (!SkinnySiluFits(sf)) continue;
    ++ran;
    LaunchRepeated(
        graph, 3,
        [&](cudaStream_t st) {
          sf.g.stream = st;
          SkinnyGemm(sf);
        },
        [&] { act.Poison(); });
    const int64_t bits = BitMismatches(FromBf16(act_ref.Download()), FromBf16(act.Download()));
    const std::string cas = std::string(sh.name) + "_T" + std::to_string(n) + (gathered ? "_gathered" : "") +
                            (graph ? "_graph" : "") + "_v" + std::to_string(v);
    std::printf("[metric] op=skinny_gemm_silu_pair case=%s act_bits=%lld of %lld%s\n", cas.c_str(), (long long)bits,
                (long long)(m * I), bits == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(bits, 0) << cas;
  }
  return ran;
}

const Shape kV2Lite{"v2lite_gate_up", false, 16, 1408, 2048, 6};
const Shape kV3{"fp8_gate_up", true, 16, 2048, 2048, 8};
// FP8 with I = 1360 (a multiple of 16, not of 128): the up tiles start inside a 128-row scale
// block.
const Shape kFp8Odd{"fp8_gate_up_I1360", true, 16, 1360, 1024, 6};

TEST(CudaSkinnyGemmSilu, V2LiteMatchesGemmThenSiluAndMul) {
  for (int64_t n : {1, 2, 5, 8})
    for (bool gathered : {false, true}) EXPECT_GT(RunCase(kV2Lite, n, gathered, false), 0) << n;
}

TEST(CudaSkinnyGemmSilu, V3Fp8MatchesGemmThenSiluAndMul) {
  for (int64_t n : {1, 3, 8})
    for (bool gathered : {false, true}) EXPECT_GT(RunCase(kV3, n, gathered, false), 0) << n;
}

TEST(CudaSkinnyGemmSilu, Fp8ScaleBlocksOffTheUpHalf) {
  for (int64_t n : {1, 4})
    for (bool gathered : {false, true}) EXPECT_GT(RunCase(kFp8Odd, n, gathered, false), 0) << n;
}

TEST(CudaSkinnyGemmSilu, GraphReplays) {
  EXPECT_GT(RunCase(kV2Lite, 1, true, true), 0);
  EXPECT_GT(RunCase(kV3, 2, true, true), 0);
}

TEST(CudaSkinnyGemmSilu, RejectsBadUse) {
  Dev<__nv_bfloat16> a(8 * 64), w(2 * 64 * 64), out(8 * 64);
  Dev<int32_t> off(std::vector<int32_t>{0, 1, 2});
  SkinnyGemmParams sp{};
  sp.g.a = a.get(); sp.g.lda = 64; sp.g.offsets = off.get(); sp.g.max_rows = 2; sp.g.w = w.get();
  sp.g.num_experts = 2; sp.g.N = 64; sp.g.K = 64; sp.g.out = out.get(); sp.g.out_type = DTypeOut::kBF16; sp.g.ldo = 32;
  sp.max_group_rows = 1; sp.splits = 1; sp.silu_pair = true;
  sp.variant = 2;
  EXPECT_TRUE(SkinnySiluFits(sp));
  sp.variant = 1;  // one 16-row tile per warp: no gate / up pair
  EXPECT_FALSE(SkinnySiluFits(sp));
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  sp.variant = 2;
  sp.g.out_type = DTypeOut::kF32;  // act is bf16
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  sp.g.out_type = DTypeOut::kBF16;
  sp.max_group_rows = 9;  // > 8 rows a group
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  sp.max_group_rows = 1;
  sp.g.N = 48;  // I = 24: not a multiple of 16
  EXPECT_FALSE(SkinnySiluFits(sp));
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  sp.g.N = 64;
  sp.splits = 2;  // a K split runs the general kernel
  EXPECT_FALSE(SkinnySiluFits(sp));
  sp.splits = 1;
  SkinnyCombineEpilogue epi{};
  sp.combine = &epi;  // one epilogue at a time
  EXPECT_FALSE(SkinnySiluFits(sp));
  sp.combine = nullptr;
  sp.variant = kSkinnyVariants;  // no such variant: not a fit (SkinnyGemm rejects it too)
  EXPECT_FALSE(SkinnySiluFits(sp));
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
