// Shared experts as extra groups of the routed experts' skinny GEMMs (the runner's
// fused_moe_shared path): MoeRoutePermute with S shared groups -> one skinny gate_up GEMM over
// E + S groups -> one SiLU -> one skinny down GEMM (fp32 out) -> MoeCombineNorm (routed rows
// rounded to bf16, shared rows summed first), vs the unfused sequence on the GPU (MoeRouting,
// MoePermute, skinny routed GEMMs with bf16 down output, the shared MLP as its own skinny GEMMs,
// MoeCombine accumulating onto it) and vs a CPU reference. V2-Lite dims (hidden 2048,
// moe_intermediate 1408, 2 shared experts, bf16, top-6) and V3 dims (7168, 2048, 1 shared expert,
// FP8 with 128x128 scales, top-8), fewer routed experts than the models (host memory), T = 1..16;
// the stacked layout is made by StackSharedExperts from the shared MLP's own weights (as at load).
// The two GPU paths differ by the GEMMs' fp32 summation order (other grid / variant) and, with
// two shared experts, by their down halves summed in the combine: bound 2e-3 relative L2 (a
// bf16 rounding of an intermediate flipped by an fp32 ulp moves single values by ~2^-8).
#include "backend/cpu/ops.h"
#include "backend/cuda/allocator.h"
#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/moe_permute.h"
#include "backend/cuda/moe_route_permute.h"
#include "backend/cuda/moe_shared_stack.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/silu_and_mul.h"
#include "backend/cuda/skinny_gemm.h"
#include "test_util.h"
// After test_util.h: its ToBf16 must see ds::F32ToBf16, not runner_kernels.h's launcher.
#include "backend/cuda/runner_kernels.h"

namespace ds::cuda::test {
namespace {

struct Dims { const char* name; int64_t Hd, I, E, K, S; bool fp8; bool cpu_ref; };

void RunCase(const Dims& c, int64_t T) {
  const std::string cas = std::string(c.name) + "_T" + std::to_string(T);
  const int64_t Hd = c.Hd, I = c.I, E = c.E, K = c.K, S = c.S, Is = S * I, m = T * K, cap = m + S * T;
  const int64_t nb13 = (2 * I + 127) / 128, kb13 = (Hd + 127) / 128, nb2 = (Hd + 127) / 128, kb2 = (I + 127) / 128;
  const size_t el = c.fp8 ? 1 : 2;
  // The routed experts [E, 2I, Hd] / [E, Hd, I] and the shared MLP [2 Is, Hd] / [Hd, Is] (gate
  // rows of all shared experts, then up rows; down columns), stacked into groups E .. E + S - 1
  // of w13 / w2 by StackSharedExperts (the runner's load-time step).
  DeviceBuffer w13((E + S) * 2 * I * Hd * el), w2((E + S) * Hd * I * el), w13_s, w2_s, sh_gu(2 * Is * Hd * el),
      sh_dn(Hd * Is * el), sh_gu_s, sh_dn_s;
  std::vector<float> w13f, w2f, guf, dnf;  // host copies (bf16 case, CPU reference)
  if (c.fp8) {
    RandomFp8(w13.as<uint8_t>(), E * 2 * I * Hd, NextSeed(), nullptr);
    RandomFp8(w2.as<uint8_t>(), E * Hd * I, NextSeed(), nullptr);
    RandomFp8(sh_gu.as<uint8_t>(), 2 * Is * Hd, NextSeed(), nullptr);
    RandomFp8(sh_dn.as<uint8_t>(), Hd * Is, NextSeed(), nullptr);
    w13_s.Reset((E + S) * nb13 * kb13 * 4);
    w2_s.Reset((E + S) * nb2 * kb2 * 4);
    sh_gu_s.Reset(2 * Is / 128 * kb13 * 4);
    sh_dn_s.Reset(nb2 * (Is / 128) * 4);
    RandomUniformF32(w13_s.as<float>(), E * nb13 * kb13, 1e-4f, NextSeed(), nullptr);
    RandomUniformF32(w2_s.as<float>(), E * nb2 * kb2, 1e-4f, NextSeed(), nullptr);
    RandomUniformF32(sh_gu_s.as<float>(), 2 * Is / 128 * kb13, 1e-4f, NextSeed(), nullptr);
    RandomUniformF32(sh_dn_s.as<float>(), nb2 * (Is / 128), 1e-4f, NextSeed(), nullptr);
  } else {
    w13f = RoundBf16Vec(RandomNormal(E * 2 * I * Hd, 0.03f));
    w2f = RoundBf16Vec(RandomNormal(E * Hd * I, 0.03f));
    guf = RoundBf16Vec(RandomNormal(2 * Is * Hd, 0.03f));
    dnf = RoundBf16Vec(RandomNormal(Hd * Is, 0.03f));
    auto up = [](DeviceBuffer* b, const std::vector<float>& v) {
      const auto h = ToBf16(v);
      DS_CUDA_CHECK(cudaMemcpy(b->get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    };
    up(&w13, w13f);
    up(&w2, w2f);
    up(&sh_gu, guf);
    up(&sh_dn, dnf);
  }
  StackSharedExperts({E, S, I, Hd, c.fp8, sh_gu.get(), c.fp8 ? sh_gu_s.as<float>() : nullptr, sh_dn.get(),
                      c.fp8 ? sh_dn_s.as<float>() : nullptr, w13.get(), c.fp8 ? w13_s.as<float>() : nullptr, w2.get(),
                      c.fp8 ? w2_s.as<float>() : nullptr, nullptr});
  const void* sgu = sh_gu.get();
  const void* sdn = sh_dn.get();
  const float* sgu_s = c.fp8 ? sh_gu_s.as<float>() : nullptr;
  const float* sdn_s = c.fp8 ? sh_dn_s.as<float>() : nullptr;
  auto x = RoundBf16Vec(RandomNormal(T * Hd));
  auto logits = RandomNormal(T * E, 2.f);
  Dev<__nv_bfloat16> dx(ToBf16(x));
  Dev<float> dl(logits);
  MoeRoutingParams rp{dl.get(), nullptr, T, E, static_cast<int>(K), 1, 1, 0, 0, true, 1.0f, nullptr, nullptr, nullptr};
  auto gemm = [&](const __nv_bfloat16* a, int64_t lda, const int32_t* offs, int64_t rows, const void* w, const float* ws,
                  int64_t groups, int64_t N, int64_t Kd, void* out, DTypeOut ot, int64_t active) {
    SkinnyGemmParams sp{};
    sp.g.a = a; sp.g.lda = lda; sp.g.offsets = offs; sp.g.max_rows = rows; sp.g.w = w; sp.g.w_fp8 = c.fp8;
    sp.g.w_scales = c.fp8 ? ws : nullptr; sp.g.num_experts = groups; sp.g.N = N; sp.g.K = Kd; sp.g.out = out;
    sp.g.out_type = ot; sp.g.ldo = N;
    sp.max_group_rows = T;
    sp.max_active_groups = active;
    SkinnyGemm(sp);
  };
  const float* w13s = c.fp8 ? w13_s.as<float>() : nullptr;
  const float* w2s = c.fp8 ? w2_s.as<float>() : nullptr;
  // Unfused.
  Dev<int32_t> uid(m), uoff(E + 1), upos(m), usrc(m), uws(2 * E);
  Dev<float> uw(m), ugu(m * 2 * I), sgu32(T * 2 * Is), uout(T * Hd);
  Dev<__nv_bfloat16> uxp(m * Hd), uact(m * I), uy(m * Hd), sact(T * Is);
  MoeRoutingParams urp = rp;
  urp.topk_ids = uid.get(); urp.topk_weights = uw.get();
  MoeRouting(urp);
  MoePermute({uid.get(), T, K, E, 1, dx.get(), Hd, Hd, uoff.get(), upos.get(), usrc.get(), uxp.get(), uws.get(), nullptr});
  gemm(uxp.get(), Hd, uoff.get(), m, w13.get(), w13s, E, 2 * I, Hd, ugu.get(), DTypeOut::kF32, std::min(E, m));
  SiluAndMul({ugu.get(), 2 * I, uact.get(), I, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, m, I, nullptr});
  gemm(uact.get(), I, uoff.get(), m, w2.get(), w2s, E, Hd, I, uy.get(), DTypeOut::kBF16, std::min(E, m));
  gemm(dx.get(), Hd, nullptr, T, sgu, sgu_s, 1, 2 * Is, Hd, sgu32.get(), DTypeOut::kF32, 0);
  SiluAndMul({sgu32.get(), 2 * Is, sact.get(), Is, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, T, Is, nullptr});
  gemm(sact.get(), Is, nullptr, T, sdn, sdn_s, 1, Hd, Is, uout.get(), DTypeOut::kF32, 0);
  MoeCombine({uy.get(), true, Hd, upos.get(), uw.get(), T, K, Hd, uout.get(), Hd, true, nullptr});
  // Fused.
  Dev<int32_t> fid(m), foff(E + S + 1), fpos(m), fsrc(cap);
  Dev<float> fw(m), fgu(cap * 2 * I), fy(cap * Hd), fout(T * Hd);
  Dev<__nv_bfloat16> fxp(cap * Hd), fact(cap * I);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u});
  MoeRoutingParams frp = rp;
  frp.topk_ids = fid.get(); frp.topk_weights = fw.get();
  MoeRoutePermute({frp, dx.get(), Hd, Hd, static_cast<int>(S), foff.get(), fpos.get(), fsrc.get(), fxp.get(), sync.get(), nullptr});
  gemm(fxp.get(), Hd, foff.get(), cap, w13.get(), w13s, E + S, 2 * I, Hd, fgu.get(), DTypeOut::kF32, std::min(E, m) + S);
  SiluAndMul({fgu.get(), 2 * I, fact.get(), I, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, cap, I, nullptr});
  gemm(fact.get(), I, foff.get(), cap, w2.get(), w2s, E + S, Hd, I, fy.get(), DTypeOut::kF32, std::min(E, m) + S);
  MoeCombineNormParams cp{};
  cp.y = fy.get(); cp.y_bf16 = false; cp.ldy = Hd; cp.round_y_bf16 = true; cp.pos = fpos.get(); cp.weights = fw.get();
  cp.n = T; cp.top_k = K; cp.d = Hd; cp.num_shared = static_cast<int>(S); cp.shared_row0 = m;
  cp.moe_out = fout.get(); cp.ld_moe_out = Hd;
  MoeCombineNorm(cp);
  const auto got = fout.Download(), unf = uout.Download();
  ExpectClose("moe_shared_fused_vs_unfused", cas, got, unf, 2e-3);
  if (!c.cpu_ref || (T != 1 && T != 2 && T != 7 && T != 16)) return;  // CPU reference at a few sizes (time)
  // CPU: out[t] = shared(x_t) + sum_j w_j expert_{ids_j}(x_t), f(x) = down(bf16(silu(gate x) * up x)).
  const auto ids = fid.Download();
  const auto wts = fw.Download();
  auto mlp = [&](const float* gu, const float* dn, int64_t inter, int64_t ld_dn, const float* xt, float* y) {
    std::vector<float> h(2 * inter), a(inter);
    cpu::Gemm({xt, Hd, gu, Hd, h.data(), 2 * inter, 1, 2 * inter, Hd, false});
    for (int64_t i = 0; i < inter; ++i) a[i] = RoundBf16(h[i] / (1.0f + std::exp(-h[i])) * h[inter + i]);
    for (int64_t o = 0; o < Hd; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < inter; ++i) acc += double(a[i]) * dn[o * ld_dn + i];
      y[o] = static_cast<float>(acc);
    }
  };
  std::vector<float> ref(T * Hd, 0.f);
  ParallelFor(T, [&](int64_t t) {
    std::vector<float> yy(Hd);
    mlp(guf.data(), dnf.data(), Is, Is, x.data() + t * Hd, yy.data());  // the shared experts as one MLP
    for (int64_t o = 0; o < Hd; ++o) ref[t * Hd + o] += yy[o];
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = ids[t * K + j];
      mlp(w13f.data() + e * 2 * I * Hd, w2f.data() + e * Hd * I, I, I, x.data() + t * Hd, yy.data());
      for (int64_t o = 0; o < Hd; ++o) ref[t * Hd + o] += wts[t * K + j] * yy[o];
    }
  });
  ExpectClose("moe_shared_fused_vs_cpu", cas, got, ref, 1e-2);
}

TEST(CudaMoeSharedFused, V2LiteDims) {
  const Dims d{"V2Lite_dims_E8_top6_shared2", 2048, 1408, 8, 6, 2, false, true};
  for (int64_t T = 1; T <= 16; ++T) RunCase(d, T);
}

TEST(CudaMoeSharedFused, V3DimsFp8) {
  const Dims d{"V3_dims_fp8_E12_top8_shared1", 7168, 2048, 12, 8, 1, true, false};
  for (int64_t T = 1; T <= 16; ++T) RunCase(d, T);
}

}  // namespace
}  // namespace ds::cuda::test
