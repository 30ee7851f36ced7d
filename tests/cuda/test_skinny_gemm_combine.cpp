// SkinnyGemm with the combine epilogue (skinny_gemm.h, SkinnyCombineEpilogue: the MoE combine +
// residual + next RMSNorm in the down GEMM's last block) against SkinnyGemm then MoeCombineNorm:
// the GEMM's output, the residual, the normalised fp32 and bf16 rows all bit-identical. V2-Lite's
// down projection (bf16, d 2048: the norm's 1024 threads played by 128 or 256) and V3's (FP8, d
// 7168), a small d (256 threads), 1 and 2 tokens, with and without the shared experts' base,
// every kernel variant that fits, repeated launches and CUDA-graph replays (the counter is left
// at zero); the argument checks. The norm-only form (top_k 0: a dense projection's fp32 output
// as the base, the residual add and RMSNorm) against SkinnyGemm then RmsNorm with its residual:
// V2-Lite's o_proj (bf16 2048 x 2048) and an FP8 projection, 1 and 2 rows, every fitting variant.
#include <cstring>

#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// The fused launch's outputs against the reference's, bit for bit (the GEMM's output y, the
// residual, the normalised fp32 and bf16 rows), and the counter left at zero: one [metric] line.
void ExpectSameBits(const char* op, const std::string& cas, const std::vector<float>& y_ref, const std::vector<float>& y,
                    const Dev<float>& res_ref, const Dev<float>& res, const Dev<float>& o32_ref, const Dev<float>& o32,
                    const Dev<__nv_bfloat16>& o16_ref, const Dev<__nv_bfloat16>& o16, const Dev<uint32_t>& counter) {
  const int64_t yb = BitMismatches(y_ref, y);
  const int64_t rb = BitMismatches(res_ref.Download(), res.Download());
  const int64_t ob = BitMismatches(o32_ref.Download(), o32.Download());
  const int64_t hb = BitMismatches(FromBf16(o16_ref.Download()), FromBf16(o16.Download()));
  const uint32_t cnt = counter.Download()[0];
  const bool ok = yb == 0 && rb == 0 && ob == 0 && hb == 0 && cnt == 0;
  std::printf("[metric] op=%s case=%s y_bits=%lld residual_bits=%lld out_bits=%lld out_bf16_bits=%lld counter=%u%s\n",
              op, cas.c_str(), (long long)yb, (long long)rb, (long long)ob, (long long)hb, cnt, ok ? " PASS" : " FAIL");
  EXPECT_EQ(yb, 0) << cas;
  EXPECT_EQ(rb, 0) << cas;
  EXPECT_EQ(ob, 0) << cas;
  EXPECT_EQ(hb, 0) << cas;
  EXPECT_EQ(cnt, 0u) << cas;
}

// The GEMM of sp with `epi`, writing y2 (the epilogue's inputs and outputs are in epi): three
// launches, or three replays of one captured graph; each launch adds into the residual, so the
// last one starts from res_h again (poisoned outputs before it).
template <class Y>
void LaunchFused(bool graph, const SkinnyGemmParams& sp, const SkinnyCombineEpilogue& epi, Dev<Y>& y2, Dev<float>& res2,
                 const std::vector<float>& res_h, Dev<float>& o32, Dev<__nv_bfloat16>& o16) {
  SkinnyGemmParams sf = sp;
  sf.g.out = y2.get();
  sf.combine = &epi;
  LaunchRepeated(
      graph, 3,
      [&](cudaStream_t st) {
        sf.g.stream = st;
        SkinnyGemm(sf);
      },
      [&] {
        res2.Upload(res_h);
        y2.Poison(); o32.Poison(); o16.Poison();
      });
}

struct Shape { const char* name; bool fp8; int64_t E, N, K; int top_k; };

// all_slots: max_active_groups 0 (one grid row per expert, so blocks of empty experts exit
// through the rows <= 0 path), else min(E, n x top_k) slots (blocks past the non-empty groups
// exit through the empty-slot path). Returns the variants that ran.
int RunCase(const Shape& sh, int64_t n, bool base, bool graph, bool all_slots = false) {
  const int64_t E = sh.E, N = sh.N, K = sh.K, d = N, m = n * sh.top_k;
  // The routing of MakeTestRouting (test_util.h): two tokens share top_k - 1 experts, so the grid
  // has empty slots whose blocks exit early and must still count out.
  const TestRouting rt = MakeTestRouting(n, sh.top_k, E);
  const std::vector<int32_t>& off = rt.offsets;
  const std::vector<int32_t>& pos = rt.pos;
  const auto act = ToBf16(RoundBf16Vec(RandomNormal(m * K)));
  const auto w = RandomF(m, 0.1f, 1.0f);
  const auto base_h = RandomNormal(n * d, 0.5f);
  const auto res_h = RandomNormal(n * d, 1.0f);
  const auto nw = RandomF(d, 0.5f, 1.5f);
  Dev<__nv_bfloat16> da(act);
  const DeviceExpertWeights wt(sh.fp8, E, N, K);
  Dev<float> dw(w), dbase(base_h), dnw(nw);
  Dev<int32_t> doff(off), dpos(pos);
  Dev<uint32_t> counter(std::vector<uint32_t>{0u});
  int ran = 0;
  for (int v = 0; v < kSkinnyVariants; ++v) {
    SkinnyGemmParams sp{};
    GroupedGemmParams& g = sp.g;
    g.lda = K; g.offsets = doff.get(); g.max_rows = m;
    g.w = wt.w(); g.w_fp8 = sh.fp8; g.w_scales = wt.w_scales();
    g.num_experts = E; g.N = N; g.K = K; g.ldo = N; g.out_type = DTypeOut::kBF16;
    sp.max_group_rows = n; sp.max_active_groups = all_slots ? 0 : std::min<int64_t>(E, m); sp.variant = v;
    if (!SkinnyCombineFits(sp, d, sh.top_k)) continue;
    ++ran;
    // Reference: the GEMM, then MoeCombineNorm.
    Dev<__nv_bfloat16> y1(m * N), y2(m * N), o16a(n * d), o16b(n * d);
    Dev<float> res1(res_h), res2(res_h), o32a(n * d), o32b(n * d);
    g.a = da.get(); g.out = y1.get();
    SkinnyGemm(sp);
    MoeCombineNormParams cp{};
    cp.y = y1.get(); cp.y_bf16 = true; cp.ldy = N; cp.pos = dpos.get(); cp.weights = dw.get(); cp.n = n;
    cp.top_k = sh.top_k; cp.d = d;
    if (base) { cp.base = dbase.get(); cp.ld_base = d; }
    cp.residual = res1.get(); cp.ldres = d; cp.norm_weight = dnw.get(); cp.eps = 1e-6f;
    cp.out = o32a.get(); cp.ldout = d; cp.out_bf16 = o16a.get(); cp.ldout_bf16 = d;
    MoeCombineNorm(cp);
    // Fused: the same GEMM with the epilogue writing to the second set of buffers.
    SkinnyCombineEpilogue epi{};
    epi.cn = cp;
    epi.cn.y = y2.get(); epi.cn.residual = res2.get(); epi.cn.out = o32b.get(); epi.cn.out_bf16 = o16b.get();
    epi.counter = counter.get();
    LaunchFused(graph, sp, epi, y2, res2, res_h, o32b, o16b);
    const std::string cas = std::string(sh.name) + "_T" + std::to_string(n) + (base ? "_base" : "") +
                            (graph ? "_graph" : "") + (all_slots ? "_allslots" : "") + "_v" + std::to_string(v);
    ExpectSameBits("skinny_gemm_combine_epilogue", cas, FromBf16(y1.Download()), FromBf16(y2.Download()), res1, res2,
                   o32a, o32b, o16a, o16b, counter);
  }
  return ran;
}

// The norm-only epilogue after a dense projection (one group of n rows, fp32 out).
int RunNormOnlyCase(const char* name, bool fp8, int64_t N, int64_t K, int64_t n, bool graph) {
  const int64_t d = N;
  const auto x = ToBf16(RoundBf16Vec(RandomNormal(n * K)));
  const auto res_h = RandomNormal(n * d, 1.0f);
  const auto nw = RandomF(d, 0.5f, 1.5f);
  Dev<__nv_bfloat16> dx(x);
  const DeviceExpertWeights wt(fp8, 1, N, K);
  Dev<float> dnw(nw);
  Dev<uint32_t> counter(std::vector<uint32_t>{0u});
  int ran = 0;
  for (int v = 0; v < kSkinnyVariants; ++v) {
    SkinnyGemmParams sp{};
    GroupedGemmParams& g = sp.g;
    g.a = dx.get(); g.lda = K; g.offsets = nullptr; g.max_rows = n;
    g.w = wt.w(); g.w_fp8 = fp8; g.w_scales = wt.w_scales();
    g.num_experts = 1; g.N = N; g.K = K; g.ldo = N; g.out_type = DTypeOut::kF32;
    sp.max_group_rows = n; sp.variant = v; sp.splits = 1;
    if (!SkinnyCombineFits(sp, d, 0)) continue;
    ++ran;
    Dev<float> y1(n * N), y2(n * N), res1(res_h), res2(res_h), o32a(n * d), o32b(n * d);
    Dev<__nv_bfloat16> o16a(n * d), o16b(n * d);
    g.out = y1.get();
    SkinnyGemm(sp);
    RmsNormParams np{y1.get(), N, res1.get(), d, dnw.get(), o32a.get(), d, DTypeOut::kF32, n, d, 1e-6f, nullptr};
    np.out_bf16 = o16a.get(); np.ld_out_bf16 = d;
    RmsNorm(np);
    SkinnyCombineEpilogue epi{};
    MoeCombineNormParams& cn = epi.cn;
    cn.y = y2.get(); cn.y_bf16 = false; cn.ldy = N; cn.n = n; cn.top_k = 0; cn.d = d;
    cn.base = y2.get(); cn.ld_base = N;
    cn.residual = res2.get(); cn.ldres = d; cn.norm_weight = dnw.get(); cn.eps = 1e-6f;
    cn.out = o32b.get(); cn.ldout = d; cn.out_bf16 = o16b.get(); cn.ldout_bf16 = d;
    epi.counter = counter.get();
    LaunchFused(graph, sp, epi, y2, res2, res_h, o32b, o16b);
    const std::string cas = std::string(name) + "_T" + std::to_string(n) + (graph ? "_graph" : "") + "_v" +
                            std::to_string(v);
    ExpectSameBits("skinny_gemm_norm_epilogue", cas, y1.Download(), y2.Download(), res1, res2, o32a, o32b, o16a, o16b,
                   counter);
  }
  return ran;
}

TEST(CudaSkinnyGemmCombine, NormOnlyMatchesGemmThenRmsNorm) {
  for (int64_t n : {1, 2}) {
    EXPECT_GT(RunNormOnlyCase("v2lite_o_proj", false, 2048, 2048, n, false), 0) << "no variant fits";
    EXPECT_GT(RunNormOnlyCase("fp8_proj", true, 1536, 2048, n, false), 0) << "no variant fits";
    EXPECT_GT(RunNormOnlyCase("small_d", false, 512, 256, n, false), 0) << "no variant fits";
  }
  EXPECT_GT(RunNormOnlyCase("v2lite_o_proj", false, 2048, 2048, 1, true), 0) << "no variant fits";
}

// Experts of a token: (t + j) x 3 mod E, distinct for E >= 3 top_k and gcd(3, E) = 1. Rows of
// at most 8 elements a thread (SkinnyCombineFits: V3's 7,168 does not fit).
const Shape kShapes[] = {
    {"v2lite_down", false, 16, 2048, 1408, 6},
    {"fp8_down_d2048", true, 32, 2048, 1536, 8},
    {"small_d", false, 13, 512, 256, 3},
};

TEST(CudaSkinnyGemmCombine, MatchesGemmThenMoeCombineNorm) {
  for (const Shape& sh : kShapes)
    for (int64_t n : {1, 2})
      for (bool base : {false, true}) EXPECT_GT(RunCase(sh, n, base, false), 0) << sh.name << ": no variant fits";
}

TEST(CudaSkinnyGemmCombine, AllExpertSlots) {
  for (const Shape& sh : kShapes) EXPECT_GT(RunCase(sh, 2, true, false, /*all_slots=*/true), 0) << sh.name;
}

TEST(CudaSkinnyGemmCombine, GraphReplays) {
  for (const Shape& sh : kShapes) EXPECT_GT(RunCase(sh, 1, true, true), 0) << sh.name;
}

TEST(CudaSkinnyGemmCombine, V3RowsDoNotFit) {
  // 7,168 elements over 128 or 256 threads: more than 8 a thread, so the runner keeps MoeCombineNorm.
  SkinnyGemmParams sp{};
  sp.g.offsets = nullptr; sp.g.max_rows = 1; sp.g.num_experts = 256; sp.g.N = 7168; sp.g.K = 2048;
  sp.g.w_fp8 = true; sp.g.out_type = DTypeOut::kBF16;
  sp.max_group_rows = 1; sp.max_active_groups = 8;
  Dev<int32_t> off(257);
  sp.g.offsets = off.get();
  for (int v = 0; v < kSkinnyVariants; ++v) {
    sp.variant = v;
    EXPECT_FALSE(SkinnyCombineFits(sp, 7168, 8)) << "variant " << v;
  }
}

TEST(CudaSkinnyGemmCombine, RejectsBadUse) {
  Dev<__nv_bfloat16> a(16 * 64), w(64 * 64), y(16 * 64);
  Dev<int32_t> off(std::vector<int32_t>{0, 1}), pos(std::vector<int32_t>{0});
  Dev<float> wts(1), res(64), out(64), nw(64);
  Dev<uint32_t> counter(std::vector<uint32_t>{0u});
  SkinnyGemmParams sp{};
  sp.g.a = a.get(); sp.g.lda = 64; sp.g.offsets = off.get(); sp.g.max_rows = 1; sp.g.w = w.get();
  sp.g.num_experts = 1; sp.g.N = 64; sp.g.K = 64; sp.g.out = y.get(); sp.g.out_type = DTypeOut::kBF16; sp.g.ldo = 64;
  sp.max_group_rows = 1;
  SkinnyCombineEpilogue epi{};
  epi.cn.y = out.get();  // not the GEMM's output
  epi.cn.y_bf16 = true; epi.cn.ldy = 64; epi.cn.pos = pos.get(); epi.cn.weights = wts.get(); epi.cn.n = 1;
  epi.cn.top_k = 1; epi.cn.d = 64; epi.cn.residual = res.get(); epi.cn.ldres = 64; epi.cn.norm_weight = nw.get();
  epi.cn.out = out.get(); epi.cn.ldout = 64;
  epi.counter = counter.get();
  sp.combine = &epi;
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  epi.cn.y = y.get();
  sp.max_group_rows = 9;  // > 8 rows a group: not the single-pass kernel the epilogue is built in
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
  sp.max_group_rows = 1;
  sp.g.max_rows = 0;  // nothing to compute: the epilogue's residual add and norm would be dropped
  EXPECT_THROW(SkinnyGemm(sp), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
