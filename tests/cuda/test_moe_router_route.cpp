// MoeRouterRoute (moe_router_route.h: router GEMV + routing + permutation metadata in one launch)
// against the two launches it replaces on the GPU, RouterGemv then MoeRoutePermute with the warp
// routing form, and against ds::cpu::MoeRouting: logits, ids and weights bit-identical to the
// pair, offsets / pos / src_row identical, ids equal to the CPU's on the same logits; at the
// routers of V3 (256 experts, noaux_tc), V2 (160, group_limited_greedy), V2-Lite (64, greedy
// softmax) and a small odd shape, 1..16 tokens, all-tied logits, repeated launches and CUDA-graph
// replays (the counter is left at zero), outputs poisoned before the last launch.
//
// Then SkinnyGemm's gathered rows (GroupedGemmParams::a_rows) with the op's src_row: the expert
// GEMM on the token rows gathered by index gives the same bits as on MoeRoutePermute's copied
// rows, bf16 and FP8 weights, fp32 and bf16 out, 1..16 tokens.
#include <cstring>
#include <memory>

#include "backend/cpu/ops.h"
#include "backend/cuda/moe_route_permute.h"
#include "backend/cuda/moe_router_route.h"
#include "backend/cuda/router_gemv.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case { const char* name; int64_t E; int top_k, n_group, topk_group, scoring, method; bool norm, bias; float scale; int64_t hidden; };

const Case kCases[] = {
    {"V3_noaux_tc", 256, 8, 8, 4, 1, 2, true, true, 2.5f, 7168},
    {"V2_group_limited_greedy", 160, 6, 8, 3, 0, 1, false, false, 16.0f, 5120},
    {"V2Lite_greedy", 64, 6, 1, 1, 0, 0, false, false, 1.0f, 2048},
    {"odd_greedy_sigmoid_norm", 10, 3, 1, 1, 1, 0, true, false, 1.0f, 64},
};

struct Outputs {
  std::vector<float> logits, w;
  std::vector<int32_t> ids, off, pos, src;
};

// Device inputs of one case: x [n, hidden] fp32 (strided), router [E, hidden], bias.
struct Inputs {
  Inputs(const Case& c, int64_t n, bool tied)
      : ldx(c.hidden + 4),
        xh(tied ? std::vector<float>(n * (c.hidden + 4), 0.f) : RandomNormal(n * (c.hidden + 4), 1.f)),
        wh(RandomNormal(c.E * c.hidden, 0.02f)), x(xh), w(wh), bias(RandomF(c.E, -0.1f, 0.1f)) {}
  int64_t ldx;
  std::vector<float> xh, wh;
  Dev<float> x, w, bias;
};

MoeRoutingParams Routing(const Case& c, const Inputs& in, int64_t n, int32_t* ids, float* w) {
  MoeRoutingParams rp{nullptr, c.bias ? in.bias.get() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group, c.scoring,
                      c.method, c.norm, c.scale, ids, w, nullptr};
  rp.warp_route = true;
  return rp;
}

// RouterGemv, then MoeRoutePermute (warp routing form, row_align 1; its copied rows of a dummy
// d = 8 bf16 input are not compared here).
Outputs Reference(const Case& c, const Inputs& in, int64_t n) {
  const int64_t m = n * c.top_k;
  Dev<float> logits(n * c.E), w(m);
  Dev<int32_t> ids(m), off(c.E + 1), pos(m), src(m);
  Dev<__nv_bfloat16> xr(ToBf16(std::vector<float>(n * 8, 1.f))), xp(m * 8);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u});
  RouterGemv({in.x.get(), in.ldx, in.w.get(), c.hidden, logits.get(), c.E, n, c.E, c.hidden, nullptr});
  MoeRoutingParams rp = Routing(c, in, n, ids.get(), w.get());
  rp.logits = logits.get();
  MoeRoutePermute({rp, xr.get(), 8, 8, 0, off.get(), pos.get(), src.get(), xp.get(), sync.get(), nullptr});
  return {logits.Download(), w.Download(), ids.Download(), off.Download(), pos.Download(), src.Download()};
}

void RunCase(const Case& c, int64_t n, bool tied, bool graph, bool fast = false) {
  const std::string cas = std::string(c.name) + "_T" + std::to_string(n) + (tied ? "_tied" : "") + (graph ? "_graph" : "") +
                          (fast ? "_fast" : "");
  const Inputs in(c, n, tied);
  const Outputs ref = Reference(c, in, n);
  const int64_t m = n * c.top_k;
  Dev<float> logits(n * c.E), w(m);
  Dev<int32_t> ids(m), off(c.E + 1), pos(m), src(m);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u});
  MoeRouterRouteParams p{};
  p.gemv = {in.x.get(), in.ldx, in.w.get(), c.hidden, logits.get(), c.E, n, c.E, c.hidden, nullptr};
  p.routing = Routing(c, in, n, ids.get(), w.get());
  p.offsets = off.get(); p.pos = pos.get(); p.src_row = src.get(); p.sync = sync.get();
  p.fast_route = fast;
  const auto poison = [&] { logits.Poison(); w.Poison(); ids.Poison(); off.Poison(); pos.Poison(); src.Poison(); };
  LaunchRepeated(
      graph, 3,
      [&](cudaStream_t st) {
        p.stream = st;
        MoeRouterRoute(p);
      },
      poison);
  const Outputs got{logits.Download(), w.Download(), ids.Download(), off.Download(), pos.Download(), src.Download()};
  // The CPU's routing of the GPU's logits.
  std::vector<int32_t> ids_cpu(m);
  std::vector<float> w_cpu(m);
  const auto bias_h = in.bias.Download();
  cpu::MoeRouting({ref.logits.data(), c.bias ? bias_h.data() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group,
                   c.scoring, c.method, c.norm, c.scale, ids_cpu.data(), w_cpu.data()});
  int64_t id_cpu = 0;
  for (int64_t i = 0; i < m; ++i) id_cpu += got.ids[i] != ids_cpu[i];
  const int64_t lg = BitMismatches(got.logits, ref.logits), idb = BitMismatches(got.ids, ref.ids),
                wb = BitMismatches(got.w, ref.w), ob = BitMismatches(got.off, ref.off),
                pb = BitMismatches(got.pos, ref.pos), sb = BitMismatches(got.src, ref.src);
  const uint32_t counter = sync.Download()[0];
  const bool ok = lg == 0 && idb == 0 && wb == 0 && ob == 0 && pb == 0 && sb == 0 && id_cpu == 0 && counter == 0;
  std::printf("[metric] op=moe_router_route case=%s logits_bits=%lld ids_bits=%lld weights_bits=%lld offsets=%lld "
              "pos=%lld src_row=%lld ids_vs_cpu=%lld counter=%u%s\n",
              cas.c_str(), (long long)lg, (long long)idb, (long long)wb, (long long)ob, (long long)pb, (long long)sb,
              (long long)id_cpu, counter, ok ? " PASS" : " FAIL");
  EXPECT_EQ(lg, 0) << cas;
  EXPECT_EQ(idb, 0) << cas;
  EXPECT_EQ(wb, 0) << cas;
  EXPECT_EQ(ob, 0) << cas;
  EXPECT_EQ(pb, 0) << cas;
  EXPECT_EQ(sb, 0) << cas;
  EXPECT_EQ(id_cpu, 0) << cas;
  EXPECT_EQ(counter, 0u) << cas;
  ExpectClose("moe_router_route_weights_vs_cpu", cas, got.w, w_cpu, 1e-6);
}

TEST(CudaMoeRouterRoute, MatchesRouterGemvAndRoutePermute) {
  for (const auto& c : kCases)
    for (int64_t n = 1; n <= kRouterGemvMaxRows; ++n) RunCase(c, n, false, false);
}

TEST(CudaMoeRouterRoute, TiesAndGraphReplays) {
  for (const auto& c : kCases)
    for (int64_t n : {1, 5, 16}) {
      RunCase(c, n, true, false);
      RunCase(c, n, false, true);
    }
}

// fast_route (session 30): one token's routing in registers, bit for bit the pair's (and the CPU's
// ids) at V3's router (groups of 32), V2-Lite's and the odd greedy one; V2's (groups of 20) and
// passes of more tokens take the default form. Random and tied logits, eager and graph replays,
// and several seeds at V3's shape.
TEST(CudaMoeRouterRoute, FastRouteBitIdentical) {
  // Which passes take the fast form: one token at V3's (groups of 32), V2-Lite's and the odd router;
  // not V2's groups of 20, nor two tokens.
  for (int i : {0, 2, 3}) EXPECT_TRUE(MoeRouterRouteFastApplies(1, kCases[i].E, kCases[i].method, kCases[i].n_group));
  EXPECT_FALSE(MoeRouterRouteFastApplies(1, kCases[1].E, kCases[1].method, kCases[1].n_group));
  EXPECT_FALSE(MoeRouterRouteFastApplies(2, kCases[0].E, kCases[0].method, kCases[0].n_group));
  // V3's router without its bias: tied logits make every group score and every expert equal (the
  // lowest-index rules of the group choice and of top-k, a group's top two held by several lanes).
  const Case v3_nobias{"V3_noaux_tc_nobias", 256, 8, 8, 4, 1, 2, true, false, 2.5f, 7168};
  for (bool tied : {true, false}) RunCase(v3_nobias, 1, tied, false, true);
  for (const auto& c : kCases)
    for (int64_t n : {1, 2}) {
      RunCase(c, n, false, false, true);
      RunCase(c, n, true, false, true);
      RunCase(c, n, false, true, true);
    }
  for (int rep = 0; rep < 20; ++rep) RunCase(kCases[0], 1, false, rep % 2 == 1, true);
}

// Timing probe (session 30; run it with --gtest_also_run_disabled_tests): V3's router at one token
// (256 experts x 7168, noaux_tc), 20 launches a CUDA graph, each on another of 12 weight copies
// (88 MB: the weights come from DRAM, as in a decode step), x in L2: the last block's tail stamped
// (debug_stamps) in the warp and fast forms; then us per launch of the whole launch in both forms,
// the launch stopped after its routing (debug_stop 3), its count (2) and its GEMV (1), and
// RouterGemv alone (the same GEMV as its own kernel).
TEST(CudaMoeRouterRoute, DISABLED_TimingReport) {
  const Case& c = kCases[0];
  const int64_t n = 1, m = c.top_k, copies = 12;
  const Inputs in(c, n, false);
  std::vector<std::unique_ptr<Dev<float>>> ws;
  for (int64_t i = 0; i < copies; ++i) ws.push_back(std::make_unique<Dev<float>>(in.wh));
  Dev<float> logits(n * c.E), w(m);
  Dev<int32_t> ids(m), off(c.E + 1), pos(m), src(m);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u});
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  constexpr int kLaunches = 20;
  // stop: MoeRouterRouteParams::debug_stop, or 4 for the fast form (fast_route, no stop).
  const auto time = [&](const char* what, int stop, bool gemv_only) {
    const CapturedGraph g(st, [&] {
      for (int i = 0; i < kLaunches; ++i) {
        const float* wi = ws[i % copies]->get();
        if (gemv_only) {
          RouterGemv({in.x.get(), in.ldx, wi, c.hidden, logits.get(), c.E, n, c.E, c.hidden, st});
          continue;
        }
        MoeRouterRouteParams p{};
        p.gemv = {in.x.get(), in.ldx, wi, c.hidden, logits.get(), c.E, n, c.E, c.hidden, st};
        p.routing = Routing(c, in, n, ids.get(), w.get());
        p.offsets = off.get(); p.pos = pos.get(); p.src_row = src.get(); p.sync = sync.get();
        p.stream = st; p.debug_stop = stop == 4 ? 0 : stop; p.fast_route = stop == 4;
        MoeRouterRoute(p);
      }
    });
    double best = 1e30;
    for (int r = 0; r < 5; ++r) best = std::min(best, ReplayUs(g, st, 10, kLaunches));
    std::printf("[timing] op=moe_router_route_v3_t1 form=%s us_per_launch=%.2f\n", what, best);
  };
  // The last block's tail, stamped (eager launches, weights rotated): us from its start to after
  // the routing, after the ids' copy, the end, in both forms.
  Dev<long long> stamps(8);
  for (int rep = 0; rep < 6; ++rep) {
    for (bool fast : {false, true}) {
      MoeRouterRouteParams p{};
      p.gemv = {in.x.get(), in.ldx, ws[(rep * 5 + fast) % copies]->get(), c.hidden, logits.get(), c.E, n, c.E, c.hidden, st};
      p.routing = Routing(c, in, n, ids.get(), w.get());
      p.offsets = off.get(); p.pos = pos.get(); p.src_row = src.get(); p.sync = sync.get();
      p.stream = st; p.debug_stamps = stamps.get(); p.fast_route = fast;
      stamps.Poison();
      DS_CUDA_CHECK(cudaDeviceSynchronize());
      MoeRouterRoute(p);
      DS_CUDA_CHECK(cudaStreamSynchronize(st));
      const std::vector<long long> t = stamps.Download();
      if (fast)
        std::printf("[timing] op=moe_router_route_v3_t1 tail, fast_route: total_us=%.2f\n", (t[3] - t[0]) / 1e3);
      else
        std::printf("[timing] op=moe_router_route_v3_t1 tail: route_us=%.2f ids_copy_us=%.2f metadata_us=%.2f total_us=%.2f\n",
                    (t[1] - t[0]) / 1e3, (t[2] - t[1]) / 1e3, (t[3] - t[2]) / 1e3, (t[3] - t[0]) / 1e3);
    }
  }
  for (int rep = 0; rep < 2; ++rep) {
    time("full", 0, false);
    time("full_fast", 4, false);
    time("stop_after_routing", 3, false);
    time("stop_after_count", 2, false);
    time("stop_after_gemv", 1, false);
    time("router_gemv_alone", 0, true);
  }
  EXPECT_EQ(sync.Download()[0], 0u);
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaMoeRouterRoute, RejectsUnsupportedSizes) {
  EXPECT_TRUE(MoeRouterRouteSupported(16, 256, 8));
  EXPECT_FALSE(MoeRouterRouteSupported(17, 256, 8));
  EXPECT_FALSE(MoeRouterRouteSupported(1, 384, 8));  // Kimi-K2's 384 experts: the unfused path
  EXPECT_FALSE(MoeRouterRouteSupported(0, 64, 6));
  Dev<uint32_t> sync(1);
  MoeRouterRouteParams p{};
  p.gemv.M = 17; p.gemv.N = 64; p.gemv.K = 64;
  p.routing.n = 17; p.routing.num_experts = 64; p.routing.top_k = 6; p.routing.n_group = 1; p.routing.topk_group = 1;
  p.sync = sync.get();
  EXPECT_THROW(MoeRouterRoute(p), CheckError);
}

// The routed gate_up GEMM of a decode pass on gathered token rows vs the permuted copy.
void RunGatherCase(const Case& c, int64_t n, bool fp8, DTypeOut out_type) {
  const std::string cas = std::string(c.name) + "_T" + std::to_string(n) + (fp8 ? "_fp8" : "_bf16") +
                          (out_type == DTypeOut::kF32 ? "_f32" : "_bf16out");
  const Inputs in(c, n, false);
  // Narrower token rows than the router's hidden size keep E x N x d weights small.
  const int64_t m = n * c.top_k, d = std::min<int64_t>(c.hidden, 512), N = 128, ldx = d + 8;
  // Token rows (bf16) and the routing of both paths.
  const auto xb = ToBf16(RoundBf16Vec(RandomNormal(n * ldx)));
  Dev<__nv_bfloat16> x(xb), xp(m * d);
  Dev<float> logits(n * c.E), w(m), logits2(n * c.E), w2(m);
  Dev<int32_t> ids(m), off(c.E + 1), pos(m), src(m), ids2(m), off2(c.E + 1), pos2(m), src2(m);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u}), sync2(std::vector<uint32_t>{0u});
  RouterGemv({in.x.get(), in.ldx, in.w.get(), c.hidden, logits.get(), c.E, n, c.E, c.hidden, nullptr});
  MoeRoutingParams rp = Routing(c, in, n, ids.get(), w.get());
  rp.logits = logits.get();
  MoeRoutePermute({rp, x.get(), ldx, d, 0, off.get(), pos.get(), src.get(), xp.get(), sync.get(), nullptr});
  MoeRouterRouteParams p{};
  p.gemv = {in.x.get(), in.ldx, in.w.get(), c.hidden, logits2.get(), c.E, n, c.E, c.hidden, nullptr};
  p.routing = Routing(c, in, n, ids2.get(), w2.get());
  p.offsets = off2.get(); p.pos = pos2.get(); p.src_row = src2.get(); p.sync = sync2.get();
  MoeRouterRoute(p);
  // Expert weights [E, N, d]: bf16, or e4m3 with 128 x 128 block scales.
  const DeviceExpertWeights wt(fp8, c.E, N, d);
  const int64_t ldo = N;
  Dev<float> o32a(m * ldo), o32b(m * ldo);
  Dev<__nv_bfloat16> o16a(m * ldo), o16b(m * ldo);
  SkinnyGemmParams sp{};
  GroupedGemmParams& g = sp.g;
  g.a = xp.get(); g.lda = d; g.offsets = off.get(); g.max_rows = m;
  g.w = wt.w(); g.w_fp8 = fp8; g.w_scales = wt.w_scales();
  g.num_experts = c.E; g.N = N; g.K = d; g.ldo = ldo; g.out_type = out_type;
  g.out = out_type == DTypeOut::kF32 ? static_cast<void*>(o32a.get()) : o16a.get();
  sp.max_group_rows = n; sp.max_active_groups = std::min<int64_t>(c.E, m);
  SkinnyGemm(sp);  // the permuted copy
  SkinnyGemmParams sg = sp;
  sg.g.a = x.get(); sg.g.lda = ldx; sg.g.a_rows = src2.get(); sg.g.offsets = off2.get();
  sg.g.out = out_type == DTypeOut::kF32 ? static_cast<void*>(o32b.get()) : o16b.get();
  SkinnyGemm(sg);  // the gathered rows
  int64_t differ = 0, nonfinite = 0;
  if (out_type == DTypeOut::kF32) {
    const auto a = o32a.Download(), b = o32b.Download();
    differ = BitMismatches(a, b);
    for (float v : b) nonfinite += !std::isfinite(v);
  } else {
    const auto a = FromBf16(o16a.Download()), b = FromBf16(o16b.Download());
    differ = BitMismatches(a, b);
    for (float v : b) nonfinite += !std::isfinite(v);
  }
  std::printf("[metric] op=skinny_gemm_gathered_rows case=%s rows=%lld differing=%lld nonfinite=%lld%s\n", cas.c_str(),
              (long long)m, (long long)differ, (long long)nonfinite, differ == 0 && nonfinite == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(differ, 0) << cas;
  EXPECT_EQ(nonfinite, 0) << cas;
}

TEST(CudaMoeRouterRoute, GatheredRowsMatchPermutedCopy) {
  for (const auto& c : kCases)
    for (int64_t n : {1, 2, 5, 8, 16}) {
      RunGatherCase(c, n, false, DTypeOut::kF32);
      RunGatherCase(c, n, std::min<int64_t>(c.hidden, 512) % 128 == 0, DTypeOut::kBF16);
    }
}

TEST(CudaMoeRouterRoute, GroupedGemmRejectsGatheredRows) {
  Dev<int32_t> rows(1);
  GroupedGemmParams g{};
  g.N = 8; g.K = 8; g.num_experts = 1; g.max_rows = 1; g.a_rows = rows.get();
  EXPECT_THROW(GroupedGemm(g), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
