// MoePersistent (moe_persistent.h: one token's whole MoE layer in one cooperative launch) against
// a CPU reference of the same math in double: the router logits, the routing (ds::cpu::MoeRouting
// on the kernel's logits: the same ids, weights within fp32 rounding), the routed and shared act
// (bf16), and the residual and next-norm outputs (the down projections from the kernel's own act,
// so one bf16 flip of an act element does not count twice). Shapes: V2-Lite's hidden and routing
// (softmax, greedy) with fewer experts, V3's routing (sigmoid, noaux_tc, bias, 256 experts), no
// shared experts, and the down phase's general cases: an odd segment count (the last pair repeats
// its segment: top-8 + one shared chunk), more segment pairs than warps (top-16 + four shared
// chunks: a warp takes two units), and one segment of 3 steps split 8 ways (empty K ranges). Each
// runs as
// repeated direct launches and as replays of one captured CUDA graph (the barrier's counter must
// be back at zero and its generation bumped three times a launch), outputs poisoned before the
// last launch. The fold form (attn_out: the post-attention norm inside the kernel) runs every
// shape once, as graph replays.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>

#include "backend/cpu/ops.h"
#include "backend/cuda/moe_persistent.h"
#include "common/check.h"
#include "test_util.h"
#include "backend/cuda/runner_kernels.h"  // after test_util.h: its helpers call ds::F32ToBf16, which this header's op would hide

namespace ds::cuda::test {
namespace {

struct Case {
  const char* name;
  int64_t hidden, E, top_k, I, Is;
  int n_group, topk_group, scoring, method;
  bool norm, bias;
  float scale;
};

const Case kCases[] = {
    {"V2Lite_dims_8experts", 2048, 8, 6, 1408, 2816, 1, 1, 0, 0, false, false, 1.0f},
    {"V3_routing_256experts", 2304, 256, 8, 64, 128, 8, 4, 1, 2, true, true, 2.5f},
    {"no_shared", 512, 16, 2, 256, 0, 1, 1, 0, 0, true, false, 1.0f},
    {"odd_segments_top8_one_shared_chunk", 1024, 32, 8, 256, 256, 1, 1, 1, 0, true, false, 1.0f},
    {"two_units_a_warp_top16_four_shared_chunks", 768, 32, 16, 128, 512, 1, 1, 0, 0, false, false, 1.0f},
    {"one_segment_empty_k_ranges", 512, 4, 1, 96, 0, 1, 1, 0, 0, false, false, 1.0f},
    // E in 33..64: the kernel routes with two experts a lane (RouteTokenInWarp<2>; V2-Lite's 64).
    {"E64_greedy_softmax", 512, 64, 6, 128, 256, 1, 1, 0, 0, false, false, 1.0f},
    {"E64_noaux_tc_sigmoid_groups", 512, 64, 8, 128, 128, 8, 4, 1, 2, true, true, 2.5f},
};

// bf16 values uniform in [-a, a] from a per-element hash (fast for tens of millions of weights).
std::vector<__nv_bfloat16> RandomBf16(size_t n, float a, uint64_t seed) {
  std::vector<__nv_bfloat16> v(n);
  ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
    uint64_t z = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    v[i] = __float2bfloat16_rn((2.f * u - 1.f) * a);
  });
  return v;
}

double B(const __nv_bfloat16& x) { return static_cast<double>(__bfloat162float(x)); }

// `launches` launches of p (graph or direct, LaunchRepeated), each from the residual res_in (the
// kernel updates p.residual in place); poison() before the last.
template <class Poison>
void LaunchFromResidual(bool graph, int launches, const MoePersistentParams& p, const float* res_in, Poison poison) {
  LaunchRepeated(
      graph, launches,
      [&](cudaStream_t st) {
        DS_CUDA_CHECK(cudaMemcpyAsync(p.residual, res_in, p.hidden * sizeof(float), cudaMemcpyDeviceToDevice, st));
        MoePersistentParams q = p;
        q.stream = st;
        MoePersistent(q);
      },
      poison);
}

// next_norm false: norm_weight = nullptr (no next norm: the kernel ends after phase 3; out32 /
// out16 stay set and must stay as poisoned).
// The same launches without shared_first (p.router_ready) on the same inputs: act, residual and
// the norm's output bit for bit, and the router count back at zero.
void ExpectSharedFirstBitsAndReset(const MoePersistentParams& p, const float* res_in, const Dev<uint32_t>& d_sync,
                             const std::string& label) {
  const std::vector<uint32_t> words = d_sync.Download();
  EXPECT_EQ(words[2], 0u) << label << ": shared_first's router count not back at zero";
  const int64_t n_act = p.top_k * p.inter + p.shared_inter;
  const auto snapshot = [&] {
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> v(p.hidden * 2 + n_act);
    DS_CUDA_CHECK(cudaMemcpy(v.data(), p.residual, p.hidden * 4, cudaMemcpyDeviceToHost));
    if (p.norm_weight) DS_CUDA_CHECK(cudaMemcpy(v.data() + p.hidden, p.out32, p.hidden * 4, cudaMemcpyDeviceToHost));
    std::vector<__nv_bfloat16> a(n_act);
    DS_CUDA_CHECK(cudaMemcpy(a.data(), p.act, n_act * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n_act; ++i) v[2 * p.hidden + i] = __bfloat162float(a[i]);
    return v;
  };
  const std::vector<float> with = snapshot();
  MoePersistentParams q = p;
  q.router_ready = nullptr;
  LaunchFromResidual(false, 1, q, res_in, [] {});
  const std::vector<float> without = snapshot();
  EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0)
      << label << ": shared_first's act / residual / norm output differ from the launch without it";
}

// shared_first: (MoePersistentParams::router_ready; ksplit 8), then ExpectSharedFirstBitsAndReset.
// tagged: the runner's form on the specialised kernel (l2_fetch 1) with router_tagged (session
// 31; E <= 64): the same checks, and (shared_first) the same bits as the generic kernel without it.
void RunCase(const Case& c, bool graph, int bps, bool fold, int ksplit = 1, bool next_norm = true, bool shared_first = false,
             bool tagged = false) {
  const int64_t Hd = c.hidden, E = c.E, K = c.top_k, I = c.I, Is = c.Is;
  const std::string label = std::string(c.name) + (graph ? " graph" : " direct") + " bps" + std::to_string(bps) +
                            (fold ? " fold" : "") + (ksplit > 1 ? " gu_ksplit" + std::to_string(ksplit) : "") +
                            (next_norm ? "" : " no_next_norm") + (shared_first ? " shared_first" : "") +
                            (tagged ? " router_tagged" : "");
  // Inputs: x32 (a normalised row), x16 its bf16, the router, the experts, the residual; with
  // fold, attn_out and the post-attention norm's weight instead of x32 / x16 (x32 is then the
  // reference's own norm of residual + attn_out).
  std::vector<float> res_in = RandomNormal(Hd, 1.f), norm_w = RandomF(Hd, 0.5f, 1.5f);
  std::vector<float> attn = RandomNormal(Hd, 1.f), post_w = RandomF(Hd, 0.5f, 1.5f), r1(Hd);
  std::vector<float> x32 = RandomNormal(Hd, 1.f);
  for (int64_t i = 0; i < Hd; ++i) r1[i] = fold ? attn[i] + res_in[i] : res_in[i];
  if (fold) {
    double ss = 0;
    for (int64_t i = 0; i < Hd; ++i) ss += double(r1[i]) * r1[i];
    const double inv = 1.0 / std::sqrt(ss / Hd + 1e-6);
    for (int64_t i = 0; i < Hd; ++i) x32[i] = static_cast<float>(r1[i] * inv * post_w[i]);
  }
  std::vector<__nv_bfloat16> x16 = ToBf16(x32);
  std::vector<float> router = RandomNormal(E * Hd, 0.05f), bias = RandomF(E, -0.1f, 0.1f);
  const float a13 = 1.f / std::sqrt(static_cast<float>(Hd)), a2 = 4.f / std::sqrt(static_cast<float>(I));
  std::vector<__nv_bfloat16> w13 = RandomBf16(E * 2 * I * Hd, 2.f * a13, NextSeed());
  std::vector<__nv_bfloat16> w2 = RandomBf16(E * Hd * I, a2, NextSeed());
  std::vector<__nv_bfloat16> sgu, sdown;
  if (Is > 0) {
    sgu = RandomBf16(2 * Is * Hd, 2.f * a13, NextSeed());
    sdown = RandomBf16(Hd * Is, 4.f / std::sqrt(static_cast<float>(Is)), NextSeed());
  }
  Dev<float> d_x32(x32), d_router(router), d_bias(bias), d_res_in(res_in), d_norm_w(norm_w), d_attn(attn),
      d_post_w(post_w);
  Dev<__nv_bfloat16> d_x16(x16), d_w13(w13), d_w2(w2);
  Dev<__nv_bfloat16> d_sgu(std::max<size_t>(sgu.size(), 8)), d_sdown(std::max<size_t>(sdown.size(), 8));
  if (Is > 0) { d_sgu.Upload(sgu); d_sdown.Upload(sdown); }
  Dev<float> d_logits(E), d_w(K), d_res(Hd), d_out32(Hd), d_part(MoePersistentGridBlocks(2));
  Dev<int32_t> d_ids(K);
  Dev<__nv_bfloat16> d_act(K * I + Is), d_out16(Hd);
  Dev<uint32_t> d_sync(4);
  DS_CUDA_CHECK(cudaMemset(d_sync.get(), 0, 4 * sizeof(uint32_t)));
  Dev<uint64_t> d_tagged(std::max<int64_t>(E, 1));  // zeroed with the sync words it is paired with
  DS_CUDA_CHECK(cudaMemset(d_tagged.get(), 0, std::max<int64_t>(E, 1) * sizeof(uint64_t)));

  MoePersistentParams p{};
  if (fold) { p.attn_out = d_attn.get(); p.post_norm_weight = d_post_w.get(); }
  else { p.x32 = d_x32.get(); p.x16 = d_x16.get(); }
  p.router_w = d_router.get();
  p.routing = MoeRoutingParams{nullptr, c.bias ? d_bias.get() : nullptr, 1, E, static_cast<int>(K), c.n_group,
                               c.topk_group, c.scoring, c.method, c.norm, c.scale, nullptr, nullptr, nullptr};
  p.routing.warp_route = true;
  p.w13 = d_w13.get(); p.w2 = d_w2.get();
  if (Is > 0) { p.shared_gu = d_sgu.get(); p.shared_down = d_sdown.get(); }
  p.hidden = Hd; p.num_experts = E; p.top_k = K; p.inter = I; p.shared_inter = Is;
  p.logits = d_logits.get(); p.topk_ids = d_ids.get(); p.topk_weights = d_w.get(); p.act = d_act.get();
  p.residual = d_res.get(); p.norm_weight = d_norm_w.get(); p.eps = 1e-6f;
  p.out32 = d_out32.get(); p.out16 = d_out16.get(); p.sync = d_sync.get(); p.partials = d_part.get();
  p.gu_ksplit = ksplit;
  p.blocks_per_sm = bps;
  if (!next_norm) p.norm_weight = nullptr;  // out32 / out16 / partials stay set: the kernel must not write them
  if (shared_first) p.router_ready = d_sync.get() + 2;
  if (tagged) {
    p.l2_fetch = 1;
    p.router_tagged = d_tagged.get();
    EXPECT_TRUE(MoePersistentSpecialized(p)) << label << ": the tagged form needs the specialised kernel";
  }
  ASSERT_EQ(MoePersistentUnsupported(p), "") << label;

  constexpr int kLaunches = 3;
  LaunchFromResidual(graph, kLaunches, p, d_res_in.get(), [&] {
        d_logits.Poison(); d_ids.Poison(); d_w.Poison(); d_act.Poison(); d_out32.Poison(); d_out16.Poison();
  });
  const std::vector<float> logits = d_logits.Download(), wts = d_w.Download(), res = d_res.Download(),
                           out32 = d_out32.Download();
  const std::vector<int32_t> ids = d_ids.Download();
  const std::vector<float> act = FromBf16(d_act.Download()), out16 = FromBf16(d_out16.Download());
  const std::vector<uint32_t> sync = d_sync.Download();

  // Router logits (double reference).
  std::vector<float> ref_logits(E);
  for (int64_t e = 0; e < E; ++e) {
    double s = 0;
    for (int64_t k = 0; k < Hd; ++k) s += double(x32[k]) * router[e * Hd + k];
    ref_logits[e] = static_cast<float>(s);
  }
  ExpectClose("moe_persistent_logits", label, logits, ref_logits, fold ? 1e-4 : 1e-5);
  // Routing on the kernel's logits.
  std::vector<int32_t> ref_ids(K);
  std::vector<float> ref_w(K);
  cpu::MoeRouting({logits.data(), c.bias ? bias.data() : nullptr, 1, E, static_cast<int>(K), c.n_group, c.topk_group,
                   c.scoring, c.method, c.norm, c.scale, ref_ids.data(), ref_w.data()});
  int64_t id_bad = 0;
  for (int64_t j = 0; j < K; ++j) id_bad += ids[j] != ref_ids[j];
  EXPECT_EQ(id_bad, 0) << label << ": routed experts differ from ds::cpu::MoeRouting's";
  ExpectClose("moe_persistent_weights", label, wts, ref_w, 1e-5);
  if (id_bad != 0) return;
  // act: routed slots then shared, silu(g) * u of double dot products.
  std::vector<float> ref_act(K * I + Is);
  const auto gate_up = [&](const __nv_bfloat16* w, int64_t rows, int64_t c0, float* outp) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < Hd; ++k) {
      g += B(w[c0 * Hd + k]) * B(x16[k]);
      u += B(w[(rows + c0) * Hd + k]) * B(x16[k]);
    }
    *outp = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
  };
  ParallelFor(K * I + Is, [&](int64_t q) {
    if (q < K * I) gate_up(w13.data() + ids[q / I] * 2 * I * Hd, I, q % I, &ref_act[q]);
    else gate_up(sgu.data(), Is, q - K * I, &ref_act[q]);
  });
  ExpectClose("moe_persistent_act", label, act, ref_act, fold ? 6e-3 : 4e-3);
  // moe[n] from the kernel's act; residual and norm.
  std::vector<float> ref_moe(Hd), got_moe(Hd), ref_res(Hd), ref_out(Hd);
  ParallelFor(Hd, [&](int64_t n) {
    double acc = 0;
    for (int64_t k = 0; k < Is; ++k) acc += B(sdown[n * Is + k]) * act[K * I + k];
    for (int64_t j = 0; j < K; ++j) {
      double y = 0;
      for (int64_t k = 0; k < I; ++k) y += B(w2[(ids[j] * Hd + n) * I + k]) * act[j * I + k];
      acc += double(wts[j]) * __bfloat162float(__float2bfloat16_rn(static_cast<float>(y)));
    }
    ref_moe[n] = static_cast<float>(acc);
    ref_res[n] = static_cast<float>(r1[n] + acc);
    got_moe[n] = res[n] - r1[n];
  });
  double ss = 0;
  for (int64_t n = 0; n < Hd; ++n) ss += double(ref_res[n]) * ref_res[n];
  const double inv = 1.0 / std::sqrt(ss / Hd + 1e-6);
  for (int64_t n = 0; n < Hd; ++n) ref_out[n] = static_cast<float>(ref_res[n] * inv * norm_w[n]);
  ExpectClose("moe_persistent_moe_out", label, got_moe, ref_moe, 2e-3);
  // One-ulp flips of a routed y_j's bf16 rounding (the kernel's fp32 sum against the double
  // reference: ~0.4% of y_j times w_j) dominate these bounds.
  ExpectClose("moe_persistent_residual", label, res, ref_res, 5e-4);
  if (next_norm) {
    ExpectClose("moe_persistent_norm_out", label, out32, ref_out, 5e-4);
    ExpectClose("moe_persistent_norm_out16", label, out16, ref_out, 5e-3);
  } else {  // untouched: still the poison of the last launch's setup
    int64_t written = 0;
    for (int64_t n = 0; n < Hd; ++n) written += !std::isnan(out32[n]) + !std::isnan(out16[n]);
    EXPECT_EQ(written, 0) << label << ": out32 / out16 written without a next norm";
  }
  // grid_barrier.cuh's 64-bit counter: each launch pads it to the next multiple of kGridEpoch (2^20).
  const uint64_t count = (uint64_t{sync[1]} << 32) | sync[0], expected = uint64_t{kLaunches} << 20;
  std::printf("[metric] op=moe_persistent case=%s barrier counter=%llu (expected %llu)\n", label.c_str(),
              (unsigned long long)count, (unsigned long long)expected);
  EXPECT_EQ(count, expected) << label;
  if (shared_first) ExpectSharedFirstBitsAndReset(p, d_res_in.get(), d_sync, label);
  if (shared_first) {
    EXPECT_EQ(d_sync.Download()[2], 0u) << label << ": shared_first's router count not back at zero";
  }
}

TEST(CudaMoePersistent, MatchesCpuReference) {
  for (const Case& c : kCases)
    for (bool graph : {false, true})
      for (int bps : {1, 2}) RunCase(c, graph, bps, false);
  for (const Case& c : kCases) RunCase(c, true, 2, true);
  RunCase(kCases[0], false, 1, true);  // the fold form at 1 block a SM, direct launches
}

// The dense form (num_experts == top_k == 0: a first_k_dense_replace layer's MLP as the shared
// weights, in `chunks` chunks of I): the post-attention norm (fold), gate_up + SiLU, down, the
// residual and the next norm (or none), against a double reference on the kernel's bf16 act.
void RunDenseCase(int64_t Hd, int64_t Is, int chunks, bool graph, int bps, int ksplit, bool next_norm,
                  bool shared_first = false) {
  const int64_t I = Is / chunks;
  const std::string label = "dense_hidden" + std::to_string(Hd) + "_inter" + std::to_string(Is) + "_chunks" +
                            std::to_string(chunks) + (graph ? " graph" : " direct") + " bps" + std::to_string(bps) +
                            " gu_ksplit" + std::to_string(ksplit) + (next_norm ? "" : " no_next_norm") +
                            (shared_first ? " shared_first" : "");
  std::vector<float> res_in = RandomNormal(Hd, 1.f), attn = RandomNormal(Hd, 1.f), post_w = RandomF(Hd, 0.5f, 1.5f),
                     norm_w = RandomF(Hd, 0.5f, 1.5f), r1(Hd), x32(Hd);
  double ss = 0;
  for (int64_t i = 0; i < Hd; ++i) ss += double(r1[i] = attn[i] + res_in[i]) * r1[i];
  const double inv = 1.0 / std::sqrt(ss / Hd + 1e-6);
  for (int64_t i = 0; i < Hd; ++i) x32[i] = static_cast<float>(r1[i] * inv * post_w[i]);
  const std::vector<__nv_bfloat16> x16 = ToBf16(x32);
  const float a13 = 1.f / std::sqrt(static_cast<float>(Hd));
  const std::vector<__nv_bfloat16> gu = RandomBf16(2 * Is * Hd, 2.f * a13, NextSeed()),
                                   down = RandomBf16(Hd * Is, 4.f / std::sqrt(static_cast<float>(Is)), NextSeed());
  Dev<float> d_res_in(res_in), d_attn(attn), d_post_w(post_w), d_norm_w(norm_w), d_res(Hd), d_out32(Hd),
      d_part(MoePersistentGridBlocks(2));
  Dev<__nv_bfloat16> d_gu(gu), d_down(down), d_act(Is), d_out16(Hd);
  Dev<uint32_t> d_sync(4);
  DS_CUDA_CHECK(cudaMemset(d_sync.get(), 0, 4 * sizeof(uint32_t)));
  MoePersistentParams p{};
  p.attn_out = d_attn.get(); p.post_norm_weight = d_post_w.get();
  p.shared_gu = d_gu.get(); p.shared_down = d_down.get();
  p.hidden = Hd; p.num_experts = 0; p.top_k = 0; p.inter = I; p.shared_inter = Is;
  p.act = d_act.get(); p.residual = d_res.get(); p.eps = 1e-6f;
  p.out32 = d_out32.get(); p.out16 = d_out16.get();  // written only with a next norm
  if (next_norm) p.norm_weight = d_norm_w.get();
  p.sync = d_sync.get(); p.partials = d_part.get(); p.blocks_per_sm = bps; p.gu_ksplit = ksplit;
  if (shared_first) p.router_ready = d_sync.get() + 2;
  ASSERT_EQ(MoePersistentUnsupported(p), "") << label;
  constexpr int kLaunches = 3;
    LaunchFromResidual(graph, kLaunches, p, d_res_in.get(),
                     [&] { d_act.Poison(); d_out32.Poison(); d_out16.Poison(); });
  const std::vector<float> act = FromBf16(d_act.Download()), res = d_res.Download(), out32 = d_out32.Download();
  std::vector<float> ref_act(Is), ref_res(Hd), ref_out(Hd);
  ParallelFor(Is, [&](int64_t c) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < Hd; ++k) {
      g += B(gu[c * Hd + k]) * B(x16[k]);
      u += B(gu[(Is + c) * Hd + k]) * B(x16[k]);
    }
    ref_act[c] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
  });
  ExpectClose("moe_persistent_dense_act", label, act, ref_act, 6e-3);
  ParallelFor(Hd, [&](int64_t n) {
    double acc = 0;
    for (int64_t k = 0; k < Is; ++k) acc += B(down[n * Is + k]) * act[k];  // on the kernel's bf16 act
    ref_res[n] = static_cast<float>(r1[n] + acc);
  });
  ExpectClose("moe_persistent_dense_residual", label, res, ref_res, 5e-4);
  if (next_norm) {
    double s2 = 0;
    for (int64_t n = 0; n < Hd; ++n) s2 += double(ref_res[n]) * ref_res[n];
    const double inv2 = 1.0 / std::sqrt(s2 / Hd + 1e-6);
    for (int64_t n = 0; n < Hd; ++n) ref_out[n] = static_cast<float>(ref_res[n] * inv2 * norm_w[n]);
    ExpectClose("moe_persistent_dense_norm_out", label, out32, ref_out, 5e-4);
  } else {
    int64_t written = 0;
    for (int64_t n = 0; n < Hd; ++n) written += !std::isnan(out32[n]);
    EXPECT_EQ(written, 0) << label << ": out32 written without a next norm";
  }
  const std::vector<uint32_t> sync = d_sync.Download();
  EXPECT_EQ((uint64_t{sync[1]} << 32) | sync[0], uint64_t{kLaunches} << 20) << label;
  if (shared_first) ExpectSharedFirstBitsAndReset(p, d_res_in.get(), d_sync, label);
  if (shared_first) {
    EXPECT_EQ(d_sync.Download()[2], 0u) << label << ": shared_first's router count not back at zero";
  }
}

TEST(CudaMoePersistent, DenseMatchesCpuReference) {
  RunDenseCase(2048, 10944, 2, true, 2, 8, true);    // V2-Lite's dense layer 0 (the runner's chunks)
  RunDenseCase(2048, 10944, 2, true, 2, 8, false);   // no next norm (norm_in_attn)
  RunDenseCase(1024, 768, 3, false, 1, 1, true);     // three chunks (a pair and a repeated segment)
  RunDenseCase(512, 1024, 4, true, 2, 2, true);
}

// No next norm (norm_in_attn: the next layer's attention kernel normalises): barrier 2 is final.
TEST(CudaMoePersistent, WithoutNextNormMatchesCpuReference) {
  for (const Case& c : kCases) RunCase(c, true, 2, true, 1, false);
  RunCase(kCases[0], false, 1, false, 1, false);
  RunCase(kCases[0], true, 2, true, 8, false);
}

// Phase 2 with each gate_up tile's hidden split over 2, 4 or 8 warps (MoePersistentParams::gu_ksplit).
TEST(CudaMoePersistent, GateUpKSplitMatchesCpuReference) {
  for (const Case& c : kCases)
    for (int ks : {2, 4, 8}) RunCase(c, true, 2, true, ks);
  RunCase(kCases[0], false, 1, false, 4);
}

// shared_first (MoePersistentParams::router_ready): the shared experts' tiles first, no barrier 1.
TEST(CudaMoePersistent, SharedFirstMatchesCpuReference) {
  for (const Case& c : kCases) {
    RunCase(c, true, 2, true, 8, false, true);   // the runner's form: fold, no next norm
    RunCase(c, false, 2, false, 8, true, true);  // x given, a next norm, direct launches
    if (c.E <= 64) {  // router_tagged on the specialised kernel (V2-Lite's E = 64 and smaller)
      RunCase(c, true, 2, true, 8, false, true, true);
      RunCase(c, false, 2, true, 8, false, true, true);
    }
  }
  RunCase(kCases[0], true, 1, true, 8, true, true);
  RunDenseCase(2048, 10944, 2, true, 2, 8, false, true);
  RunDenseCase(512, 1024, 4, false, 1, 8, true, true);
}

// Information check (disabled; run with --gtest_also_run_disabled_tests): V2-Lite's MoE layer
// (64 experts, top-6, I 1408, two shared experts, hidden 2048) timed as graph replays of 20
// back-to-back launches (CUDA events; the weights, 1.1 GB, do not fit L2), the same with
// barriers_only (launch + its grid barriers), the same 20 launches over 8 weight sets in turn, and
// one launch's per-phase %globaltimer intervals over the blocks (median, min, max) with the start
// skew and when the last block ended each phase (a timeline from the first block's start): where
// the kernel's time goes. A kernel alone is not the model: session 27's fused_down measured ~3.8
// us slower here and ~15 us a layer slower in the model (bench/results/session27_2026-12-01_run{5,7}),
// so a change is judged by the model's step (one-batch), not by this report.
TEST(CudaMoePersistent, DISABLED_V2LiteTimingReport) {
  const int64_t Hd = 2048, E = 64, K = 6, I = 1408, Is = 2816;
  std::vector<float> x32 = RandomNormal(Hd, 1.f);
  Dev<float> d_x32(x32), d_router(RandomNormal(E * Hd, 0.05f)), d_res(RandomNormal(Hd, 1.f)),
      d_norm_w(RandomF(Hd, 0.5f, 1.5f));
  Dev<__nv_bfloat16> d_x16(ToBf16(x32)), d_w13(RandomBf16(E * 2 * I * Hd, 0.04f, NextSeed())),
      d_w2(RandomBf16(E * Hd * I, 0.1f, NextSeed())), d_sgu(RandomBf16(2 * Is * Hd, 0.04f, NextSeed())),
      d_sdown(RandomBf16(Hd * Is, 0.07f, NextSeed()));
  const int grid_max = MoePersistentGridBlocks(2);
  Dev<float> d_logits(E), d_w(K), d_out32(Hd), d_part(grid_max);
  Dev<int32_t> d_ids(K);
  Dev<__nv_bfloat16> d_act(K * I + Is), d_out16(Hd);
  Dev<uint32_t> d_sync(4);
  Dev<long long> d_stamps(static_cast<size_t>(grid_max) * kMoePersistentStamps);
  DS_CUDA_CHECK(cudaMemset(d_sync.get(), 0, 4 * sizeof(uint32_t)));
  MoePersistentParams p{};
  p.x32 = d_x32.get(); p.x16 = d_x16.get(); p.router_w = d_router.get();
  p.routing = MoeRoutingParams{nullptr, nullptr, 1, E, static_cast<int>(K), 1, 1, 0, 0, false, 1.0f, nullptr, nullptr, nullptr};
  p.routing.warp_route = true;
  p.w13 = d_w13.get(); p.w2 = d_w2.get(); p.shared_gu = d_sgu.get(); p.shared_down = d_sdown.get();
  p.hidden = Hd; p.num_experts = E; p.top_k = K; p.inter = I; p.shared_inter = Is;
  p.logits = d_logits.get(); p.topk_ids = d_ids.get(); p.topk_weights = d_w.get(); p.act = d_act.get();
  p.residual = d_res.get(); p.norm_weight = d_norm_w.get();
  p.out32 = d_out32.get(); p.out16 = d_out16.get(); p.sync = d_sync.get(); p.partials = d_part.get();
  ASSERT_EQ(MoePersistentUnsupported(p), "");
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  constexpr int kReps = 20, kReplays = 5;
  // More weight sets (device fills: timing only; session 27), so that consecutive launches read
  // other weights and route other experts, as the model's layers do (set 0: the one above).
  constexpr int kSets = 8;
  struct WSet {
    std::unique_ptr<Dev<__nv_bfloat16>> w13, w2, sgu, sdown, x16;
    std::unique_ptr<Dev<float>> router, x32, attn;
  };
  std::vector<WSet> wsets(kSets - 1);
  const auto fill16 = [](int64_t n, float a) {
    auto d = std::make_unique<Dev<__nv_bfloat16>>(n);
    RandomUniformBf16(d->get(), n, a, NextSeed(), nullptr);
    return d;
  };
  for (WSet& w : wsets) {
    w.w13 = fill16(E * 2 * I * Hd, 0.04f); w.w2 = fill16(E * Hd * I, 0.1f);
    w.sgu = fill16(2 * Is * Hd, 0.04f); w.sdown = fill16(Hd * Is, 0.07f);
    const std::vector<float> xs = RandomNormal(Hd, 1.f);
    w.x32 = std::make_unique<Dev<float>>(xs);
    w.x16 = std::make_unique<Dev<__nv_bfloat16>>(ToBf16(xs));
    w.router = std::make_unique<Dev<float>>(RandomNormal(E * Hd, 0.05f));
    w.attn = std::make_unique<Dev<float>>(RandomNormal(Hd, 1.f));
  }
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  const auto with_set = [&](MoePersistentParams q, int si) {
    if (si == 0) return q;
    const WSet& w = wsets[si - 1];
    q.w13 = w.w13->get(); q.w2 = w.w2->get(); q.shared_gu = w.sgu->get(); q.shared_down = w.sdown->get();
    q.router_w = w.router->get();
    if (q.attn_out) q.attn_out = w.attn->get();
    else { q.x32 = w.x32->get(); q.x16 = w.x16->get(); }
    return q;
  };
  const auto time_us = [&](bool barriers_only, int nsets = 1) {
    MoePersistentParams q = p;
    q.stream = st;
    q.barriers_only = barriers_only;
    const CapturedGraph g(st, [&] { for (int i = 0; i < kReps; ++i) MoePersistent(with_set(q, i % nsets)); });
    return ReplayUs(g, st, kReplays, kReps);
  };
  // (bps, gu_ksplit, shared_first, l2_fetch, next norm); the runner's default since session 21:
  // (2, 8, on, 1), without a next norm (norm_in_attn). (Session 20's tail_fold variants:
  // session21_2026-12-01_run15; bps 1, no shared_first, no l2_fetch: run 8; session 22's MoE
  // without barrier 2 (per-segment counters): session22_2026-12-01_run{2,3}; with the first 132
  // shared tiles done by the attention kernel: run 7.)
  Dev<long long> d_tstamps(static_cast<size_t>(grid_max) * kMoePersistentTileStamps);
  // cv: the carveout (persistent_carveout: 72, the runner's); fold: the post-attention norm in the
  // kernel (attn_out): the last entry is the runner's form.
  Dev<float> d_attn(RandomNormal(Hd, 1.f)), d_post_w(RandomF(Hd, 0.5f, 1.5f));
  for (const auto& [bps, ks, qu, fetch, nn, cv, fold] :
       {std::tuple{2, 8, true, 1, true, -1, false}, std::tuple{2, 8, true, 1, false, -1, false},
        std::tuple{2, 8, true, 1, false, 72, true}}) {
    p.carveout = cv;
    p.attn_out = fold ? d_attn.get() : nullptr;
    p.post_norm_weight = fold ? d_post_w.get() : nullptr;

    p.norm_weight = nn ? d_norm_w.get() : nullptr;
    p.l2_fetch = fetch;
    p.blocks_per_sm = bps;
    p.gu_ksplit = ks;
    p.router_ready = qu ? d_sync.get() + 2 : nullptr;
    const int grid = MoePersistentGridBlocks(bps);
    const double full = time_us(false), bar = time_us(true), full_sets = time_us(false, kSets);
    const double bytes = 2.0 * (K * 3 * I * Hd + 3 * Is * Hd) + 4.0 * E * Hd;
    std::printf("[metric] op=moe_persistent_timing case=V2Lite bps=%d gu_ksplit=%d shared_first=%d l2_fetch=%d next_norm=%d carveout=%d fold=%d "
                "grid=%d full=%.2f us (%.0f GB/s on %.1f MB) barriers_only=%.2f us; %d weight sets in turn: %.2f us\n", bps,
                ks, qu, fetch, nn, cv, fold, grid, full, bytes / full / 1e3, bytes / 1e6, bar, kSets, full_sets);
    // Per-phase intervals of one launch.
    MoePersistentParams q = p;
    q.stamps = d_stamps.get();
    q.tile_stamps = d_tstamps.get();
    q.stream = st;
    DS_CUDA_CHECK(cudaMemsetAsync(d_tstamps.get(), 0, d_tstamps.size() * sizeof(long long), st));
    MoePersistent(q);
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<long long> s = d_stamps.Download();
    const std::vector<long long> ts = d_tstamps.Download();
    // %globaltimer stamps (ns, one clock for all SMs): each interval's median / min / max over the
    // blocks, and when the last block reached its end (from the first block's start).
    const char* names[kMoePersistentStamps - 1] = {"phase1 router", "barrier1", "phase2 route+gate_up(routed+shared)",
                                                   "barrier2", "phase3 down+combine", "barrier3", "phase4 norm"};
    long long t0 = s[0], start_last = s[0];
    for (int b = 0; b < grid; ++b) {
      t0 = std::min(t0, s[b * kMoePersistentStamps]);
      start_last = std::max(start_last, s[b * kMoePersistentStamps]);
    }
    std::printf("[metric] op=moe_persistent_phase case=V2Lite bps=%d gu_ksplit=%d shared_first=%d l2_fetch=%d next_norm=%d carveout=%d fold=%d "
                "start skew: last block started at %.2f us\n", bps, ks, qu, fetch, nn, cv, fold,
                1e-3 * static_cast<double>(start_last - t0));
    for (int i = 0; i + 1 < kMoePersistentStamps; ++i) {
      std::vector<long long> d(grid);
      long long last = t0;
      for (int b = 0; b < grid; ++b) {
        d[b] = s[b * kMoePersistentStamps + i + 1] - s[b * kMoePersistentStamps + i];
        last = std::max(last, s[b * kMoePersistentStamps + i + 1]);
      }
      std::sort(d.begin(), d.end());
      std::printf("[metric] op=moe_persistent_phase case=V2Lite bps=%d gu_ksplit=%d shared_first=%d l2_fetch=%d next_norm=%d carveout=%d fold=%d "
                  "%s: median %.2f us, min %.2f, max %.2f; last block done at %.2f us\n", bps, ks, qu, fetch, nn, cv, fold,
                  names[i],
                  1e-3 * d[grid / 2], 1e-3 * d[0], 1e-3 * d[grid - 1], 1e-3 * static_cast<double>(last - t0));
    }
    // Phase 2 per group of blocks (router blocks b < E; then by their number of shared tiles):
    // when each block's routing started and ended and each round's part ended, from the first
    // block's start (us): median / max over the group. (The group labels assume grid < Is / 8 <=
    // 2 grid, true for V2-Lite's 352 shared tiles on 132 SMs at 2 blocks each.)
    const int64_t nshared = Is / 8;
    const auto group_of = [&](int b) { return b < E ? 0 : b < nshared - grid ? 1 : 2; };
    const char* gnames[3] = {"router blocks", "2 shared tiles", "1 shared tile"};
    for (int gi = 0; gi < 3; ++gi) {
      for (int i = 0; i < kMoePersistentTileStamps; ++i) {
        std::vector<double> v;
        for (int b = 0; b < grid; ++b)
          if (group_of(b) == gi && ts[b * kMoePersistentTileStamps + i] != 0)
            v.push_back(1e-3 * static_cast<double>(ts[b * kMoePersistentTileStamps + i] - t0));
        if (v.empty()) continue;
        std::sort(v.begin(), v.end());
        std::printf("[metric] op=moe_persistent_tiles next_norm=%d fold=%d group=\"%s\" blocks=%zu %s: median %.2f us, "
                    "max %.2f\n", nn, fold, gnames[gi], v.size(),
                    i == 0 ? "route start" : i == 1 ? "router count seen" : i == 2 ? "routed (warp 0)" : i == 3 ? "route end"
                                                        : ("round " + std::to_string(i - 4) + " end").c_str(),
                    v[v.size() / 2], v.back());
      }
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaMoePersistent, RejectsUnsupported) {
  MoePersistentParams p{};
  p.hidden = 2050; p.num_experts = 300; p.top_k = 20; p.inter = 100; p.shared_inter = 24;
  const std::string why = MoePersistentUnsupported(p);
  for (const char* part : {"hidden 2050", "moe_intermediate_size 100", "shared intermediate size 24",
                           "num_experts 300", "top_k 20", "null pointer"})
    EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;
  // Shapes that pass the basic checks but not the kernel's limits.
  MoePersistentParams q{};
  q.hidden = int64_t{8} * kMoePersistentMaxTilesPerBlock * MoePersistentGridBlocks(1) + 32;  // too many down tiles
  q.num_experts = 8; q.top_k = 2; q.inter = 64; q.shared_inter = 96;  // 96: not a multiple of I
  q.routing.num_experts = 8; q.routing.top_k = 2; q.routing.n_group = 1; q.routing.topk_group = 1;
  q.blocks_per_sm = 1;
  const std::string why2 = MoePersistentUnsupported(q);
  for (const char* part : {"over the down tiles a block keeps", "is not a multiple of I"})
    EXPECT_NE(why2.find(part), std::string::npos) << "missing '" << part << "' in: " << why2;
  q.blocks_per_sm = 3;
  EXPECT_NE(MoePersistentUnsupported(q).find("blocks_per_sm 3"), std::string::npos);
  q.blocks_per_sm = 1;
  q.gu_ksplit = 3;
  EXPECT_NE(MoePersistentUnsupported(q).find("gu_ksplit 3"), std::string::npos);
  q.l2_fetch = 3;
  EXPECT_NE(MoePersistentUnsupported(q).find("l2_fetch 3"), std::string::npos);
  q.specialize = 3;
  EXPECT_NE(MoePersistentUnsupported(q).find("specialize 3"), std::string::npos);
  // The runner's split for small hidden sizes (the tiny fixtures): the largest that fits.
  MoePersistentParams r{};
  r.top_k = 2; r.inter = 64; r.shared_inter = 64; r.blocks_per_sm = 2;
  r.hidden = 64;
  EXPECT_EQ(MoePersistentGuKsplitFor(r, 8), 2);
  r.hidden = 2048;
  EXPECT_EQ(MoePersistentGuKsplitFor(r, 8), 8);
  EXPECT_EQ(MoePersistentGuKsplitFor(r, 4), 4);
  r.hidden = 96;
  EXPECT_EQ(MoePersistentGuKsplitFor(r, 8), 1);
}

}  // namespace
}  // namespace ds::cuda::test
