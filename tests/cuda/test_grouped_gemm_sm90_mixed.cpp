// sm_90a mixed-input grouped GEMM (grouped_gemm_sm90_mixed.h: bf16 activations x e4m3 weights
// with DeepSeek's 128x128 block scales, CUTLASS RS wgmma) vs an exact CPU emulation of its
// numerics on fresh random inputs: every weight dequantised as the kernel does,
//   wdq = bf16_rn( fp32(e4m3) * scale )   (one fp32 multiply, one round to bf16),
// then an fp32 GEMM per group on the bf16 activations, so only the accumulation order differs
// (fp32 output: relative L2 <= 2e-4; bf16 output adds one rounding: 5e-3). The scales are
// random fp32 values (full mantissas), so a kernel that rounded the scale to bf16 first, or
// applied it after the MMA (the mma.sync kernel's numerics, <= 2^-9 relative per weight: 1.6e-3
// relative L2 on these inputs by a torch emulation; a bf16 scale: 2.5e-3), misses the 2e-4 bound; the mma.sync comparison (DispatchFrom-
// GroupedGemm, V3Dense) is bounded by that 2^-9 floor instead (4e-3).
// Shapes: DeepSeek-V3 experts (hidden 7168, moe_intermediate 2048; 256 experts over 1 / 8 /
// 32 ranks, top-8; the 256-expert case with N cut down to keep the host reference small) and
// the V3 dense FP8 projections as one group (o_proj K 16384 N 7168, dense gate_up with N cut,
// q_b_proj, kv_a_proj_with_mqa N 576), plus edge groups: empty groups, one group owning all
// rows, sizes not multiples of 64 / 128, a single row, every group empty, N not a multiple of
// 128. The output starts poisoned (NaN): rows outside the groups, the gap past N (ldo > N) and
// the spare rows must stay untouched; NaN/Inf in the result fail. Also: the dispatch from
// GroupedGemm (opt-in sm90_mixed), the unsupported-shape reasons, and a CUDA-graph capture
// replayed with other device-side offsets (graph safety: no host-read offsets). Both tiles (128
// and 256 tokens) run the edge groups; the shape cases use the automatic choice (both occur)
// plus one forced 256-token case.
// Every test skips (GTEST_SKIP, with the reason) without CUTLASS or on a non-sm_90 device.
#include <random>

#include "backend/cpu/ops.h"
#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/grouped_gemm_sm90_mixed.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// Random FP8 expert weights [E, N, K] (e4m3 codes over the whole range) with fp32 block scales
// [E, ceil(N/128), K/128] of DeepSeek's size (~amax / 448) and full fp32 mantissas.
struct Fp8Weights {
  int64_t E, N, K, nb, kb;
  std::vector<uint8_t> q;
  std::vector<float> s;
  float Scale(int64_t e, int64_t n, int64_t k) const { return s[(e * nb + n / 128) * kb + k / 128]; }
};
Fp8Weights MakeWeights(int64_t E, int64_t N, int64_t K) {
  Fp8Weights w{E, N, K, (N + 127) / 128, (K + 127) / 128, {}, {}};
  w.s = RandomF(E * w.nb * w.kb, 0.5f, 2.0f);
  for (auto& v : w.s) v *= std::ldexp(1.f, -9);
  std::vector<float> raw(E * N * K);
  FillBlocks(raw, [](float& x, uint64_t& st) { x = (NextUniform01(st) * 2.f - 1.f) * 300.f; });
  w.q.resize(raw.size());
  ParallelFor(static_cast<int64_t>(raw.size()), [&](int64_t i) { w.q[i] = F32ToFp8E4M3(raw[i]); });
  return w;
}
// The kernel's dequantised weights (scale-then-round) or, exact = true, fp32(e4m3) * scale
// without the bf16 rounding (the mma.sync kernel's numerics up to fp32 rounding).
std::vector<float> Dequant(const Fp8Weights& w, bool exact) {
  std::vector<float> d(w.q.size());
  ParallelFor(w.E * w.N, [&](int64_t en) {
    const int64_t e = en / w.N, n = en % w.N;
    for (int64_t k = 0; k < w.K; ++k) {
      const float v = Fp8E4M3ToF32(w.q[en * w.K + k]) * w.Scale(e, n, k);  // fp32 product, as the kernel
      d[en * w.K + k] = exact ? v : RoundBf16(v);
    }
  });
  return d;
}

// out[rows, N] = per group a[rows_e] @ wd[e]^T (fp32).
std::vector<float> Reference(const std::vector<float>& a, int64_t K, const std::vector<float>& wd,
                             const std::vector<int32_t>& off, int64_t N) {
  const int64_t E = static_cast<int64_t>(off.size()) - 1;
  std::vector<float> ref(static_cast<size_t>(off.back()) * N, 0.f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = off[e + 1] - off[e];
    if (m > 0) cpu::Gemm({a.data() + off[e] * K, K, wd.data() + e * N * K, K, ref.data() + off[e] * N, N, m, N, K, false});
  }
  return ref;
}

// The [rows, N] result out of a poisoned [max_rows, ldo] buffer; counts finite values written
// outside it (rows past offsets[E], columns N..ldo).
std::vector<float> Extract(const std::vector<float>& full, int64_t rows, int64_t max_rows, int64_t N, int64_t ldo,
                           int64_t* stray) {
  std::vector<float> got(rows * N);
  *stray = 0;
  for (int64_t r = 0; r < max_rows; ++r)
    for (int64_t n = 0; n < ldo; ++n) {
      const float v = full[r * ldo + n];
      if (r < rows && n < N) got[r * N + n] = v;
      else *stray += std::isfinite(v) ? 1 : 0;
    }
  return got;
}

struct Case {
  std::string name;
  int64_t E, N, K;
  std::vector<int32_t> counts;  // rows of each group (size E)
  bool out_f32;
  bool vs_exact = false;        // also bound the distance to the unrounded (mma.sync) numerics
  Sm90MixedTile tile = Sm90MixedTile::kAuto;
};

void RunMixed(const Case& c) {
  ASSERT_EQ(static_cast<int64_t>(c.counts.size()), c.E);
  const int64_t E = c.E, N = c.N, K = c.K, ldo = N + 8;  // ldo > N: the gap must stay untouched
  std::vector<int32_t> off{0};
  for (int64_t e = 0; e < E; ++e) off.push_back(off.back() + c.counts[e]);
  const int64_t rows = off.back(), max_rows = rows + 40;  // spare rows past offsets[E]
  const auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  const Fp8Weights w = MakeWeights(E, N, K);
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<int32_t> doff(off);
  Dev<uint8_t> dw(w.q);
  Dev<float> ds(w.s);
  Dev<float> dyf(c.out_f32 ? max_rows * ldo : 1);
  Dev<__nv_bfloat16> dyb(c.out_f32 ? 1 : max_rows * ldo);

  GroupedGemmParams p{};
  p.a = da.get(); p.lda = K; p.offsets = doff.get(); p.max_rows = max_rows;
  p.w = dw.get(); p.w_fp8 = true; p.w_scales = ds.get(); p.num_experts = E; p.N = N; p.K = K;
  p.out = c.out_f32 ? static_cast<void*>(dyf.get()) : dyb.get(); p.out_type = c.out_f32 ? DTypeOut::kF32 : DTypeOut::kBF16;
  p.ldo = ldo;
  ASSERT_EQ(GroupedGemmSm90MixedUnsupported(p), "");
  const size_t wsb = GroupedGemmSm90MixedWorkspaceBytes(E, N, K);
  Dev<uint8_t> ws(wsb);
  p.workspace = ws.get(); p.workspace_bytes = wsb;
  GroupedGemmSm90Mixed(p, c.tile);
  DS_CUDA_CHECK(cudaGetLastError());

  const std::vector<float> full = c.out_f32 ? dyf.Download() : FromBf16(dyb.Download());
  int64_t stray = 0;
  const auto got = Extract(full, rows, max_rows, N, ldo, &stray);
  EXPECT_EQ(stray, 0) << c.name << ": wrote outside the groups' rows or past N";
  const auto ref = Reference(a, K, Dequant(w, false), off, N);
  const double rel = c.out_f32 ? 2e-4 : 5e-3;
  double max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));
  const std::string cas = c.name + (c.out_f32 ? "_f32" : "_bf16") +
                          (GroupedGemmSm90MixedWideTile(p, c.tile) ? "_t256" : "_t128");
  ExpectClose("grouped_gemm_sm90_mixed", cas, got, ref, rel, 16 * rel * max_ref);
  if (c.vs_exact) {
    // The error bound of scale-then-round: <= 2^-9 relative per weight; on these random inputs
    // the output's relative L2 is ~1.6e-3 (torch emulation; bound 4e-3, 6e-3 with bf16 output).
    const auto exact = Reference(a, K, Dequant(w, true), off, N);
    ExpectClose("grouped_gemm_sm90_mixed_vs_unrounded_weights", cas, got, exact, c.out_f32 ? 4e-3 : 6e-3);
  }
}

#define SKIP_WITHOUT_MIXED()                                                                              \
  if (!GroupedGemmSm90MixedAvailable())                                                                   \
  GTEST_SKIP() << "no sm_90a mixed-input grouped GEMM: built without CUTLASS (scripts/get_cutlass.sh) or " \
                  "the device is not compute capability 9.0"

TEST(CudaGroupedGemmSm90Mixed, EdgeGroups) {
  SKIP_WITHOUT_MIXED();
  for (Sm90MixedTile tile : {Sm90MixedTile::k128, Sm90MixedTile::k256})
    for (bool f32 : {true, false}) {
      // Empty groups (first, middle, last), sizes not multiples of 64 / 128, one > 2 tiles.
      RunMixed({"uneven", 7, 384, 256, {0, 1, 77, 0, 300, 129, 0}, f32, true, tile});
      // One group owns every row.
      RunMixed({"one_owner", 5, 256, 512, {0, 0, 517, 0, 0}, f32, false, tile});
      // A single row.
      RunMixed({"single_row", 3, 256, 384, {0, 1, 0}, f32, false, tile});
      // Every group empty: nothing is written.
      RunMixed({"all_empty", 4, 128, 128, {0, 0, 0, 0}, f32, false, tile});
      // N a multiple of 8 but not of 128: partial weight tiles and a partial last scale block.
      RunMixed({"N200", 4, 200, 384, {70, 0, 3, 131}, f32, false, tile});
    }
}

TEST(CudaGroupedGemmSm90Mixed, V3Experts) {
  SKIP_WITHOUT_MIXED();
  // DeepSeek-V3: hidden 7168, moe_intermediate 2048, top-8 of 256 experts (the runner: w13 out
  // fp32, w2 out bf16).
  // EP32: 8 local experts, 2048 tokens routed over all 256 experts (~64 rows each).
  const auto cnt = RoutedCounts(2048, 8, 256);
  const std::vector<int32_t> ep32(cnt.begin(), cnt.begin() + 8);
  RunMixed({"v3_ep32_w13", 8, 4096, 7168, ep32, true, true});
  RunMixed({"v3_ep32_w2", 8, 7168, 2048, ep32, false});
  // EP8: 32 local experts.
  const std::vector<int32_t> ep8(cnt.begin(), cnt.begin() + 32);
  RunMixed({"v3_ep8_w2", 32, 7168, 2048, ep8, false});
  RunMixed({"v3_ep8_w2", 32, 7168, 2048, ep8, false, false, Sm90MixedTile::k256});
  RunMixed({"v3_ep8_w13_n1024", 32, 1024, 7168, ep8, true});
  // EP1: all 256 experts (N cut to keep the host reference small; K real).
  RunMixed({"v3_ep1_w13_n256", 256, 256, 7168, RoutedCounts(256, 8, 256), true});
  RunMixed({"v3_ep1_w2_n256", 256, 256, 2048, RoutedCounts(256, 8, 256), false});
}

TEST(CudaGroupedGemmSm90Mixed, V3DenseProjections) {
  SKIP_WITHOUT_MIXED();
  // The dense FP8 projections as the runner calls them: one group of M rows, fp32 out.
  RunMixed({"v3_o_proj", 1, 7168, 16384, {320}, true, true});
  RunMixed({"v3_dense_gate_up_n4096", 1, 4096, 7168, {256}, true});
  RunMixed({"v3_q_b_proj", 1, 24576, 1536, {192}, true});
  RunMixed({"v3_kv_a_proj", 1, 576, 7168, {333}, true, true});
  RunMixed({"v3_q_a_proj", 1, 1536, 7168, {130}, true});
}

TEST(CudaGroupedGemmSm90Mixed, Unsupported) {
  SKIP_WITHOUT_MIXED();
  Dev<__nv_bfloat16> a(256 * 256);
  Dev<uint8_t> w(256 * 256);
  Dev<float> s(4), y(256 * 256);
  Dev<int32_t> off(std::vector<int32_t>{0, 256});
  GroupedGemmParams p{};
  p.a = a.get(); p.lda = 256; p.offsets = off.get(); p.max_rows = 256; p.w = w.get(); p.w_fp8 = true;
  p.w_scales = s.get(); p.num_experts = 1; p.N = 256; p.K = 256; p.out = y.get(); p.out_type = DTypeOut::kF32; p.ldo = 256;
  EXPECT_EQ(GroupedGemmSm90MixedUnsupported(p), "");
  GroupedGemmParams q = p;
  q.K = 192; q.lda = 192;
  EXPECT_NE(GroupedGemmSm90MixedUnsupported(q).find("K % 128"), std::string::npos);
  q = p; q.N = 100; q.ldo = 100;
  EXPECT_NE(GroupedGemmSm90MixedUnsupported(q).find("N % 8"), std::string::npos);
  q = p; q.lda = 260;
  EXPECT_NE(GroupedGemmSm90MixedUnsupported(q).find("lda"), std::string::npos);
  q = p; q.w_fp8 = false;
  EXPECT_NE(GroupedGemmSm90MixedUnsupported(q).find("e4m3"), std::string::npos);
  // GroupedGemm: opt-in only, and only where supported.
  q = p;
  EXPECT_EQ(GroupedGemmWorkspaceBytes(q), 0u) << "sm90_mixed is off by default";
  q.sm90_mixed = true;
  EXPECT_GT(GroupedGemmWorkspaceBytes(q), 0u);
  q.K = 192; q.lda = 192;
  EXPECT_EQ(GroupedGemmWorkspaceBytes(q), 0u);
  q = p; q.sm90_mixed = true; q.force_wmma = true;
  EXPECT_EQ(GroupedGemmWorkspaceBytes(q), 0u);
}

// GroupedGemm with sm90_mixed and a workspace takes the new kernel: it matches the exact
// emulation (2e-4, which the mma.sync kernel's numerics miss) and the mma.sync kernel
// (sm90_mixed off) within the 2^-9 scale-then-round floor. 64-row padded segments as
// moe_permute writes them.
TEST(CudaGroupedGemmSm90Mixed, DispatchFromGroupedGemm) {
  SKIP_WITHOUT_MIXED();
  const int64_t E = 6, N = 512, K = 1024;
  const std::vector<int32_t> off{0, 64, 64, 256, 320, 320, 448};
  const int64_t max_rows = off.back() + 64, rows = off.back();
  const auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  const Fp8Weights w = MakeWeights(E, N, K);
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<uint8_t> dw(w.q);
  Dev<float> ds(w.s), y_mixed(max_rows * N), y_mma(max_rows * N);
  Dev<int32_t> doff(off);
  GroupedGemmParams p{};
  p.a = da.get(); p.lda = K; p.offsets = doff.get(); p.max_rows = max_rows; p.w = dw.get(); p.w_fp8 = true;
  p.w_scales = ds.get(); p.num_experts = E; p.N = N; p.K = K; p.out_type = DTypeOut::kF32; p.ldo = N;
  p.sm90_mixed = true;
  const size_t wsb = GroupedGemmWorkspaceBytes(p);
  ASSERT_GT(wsb, 0u);
  Dev<uint8_t> ws(wsb);
  p.workspace = ws.get(); p.workspace_bytes = wsb; p.out = y_mixed.get();
  GroupedGemm(p);
  p.sm90_mixed = false; p.out = y_mma.get();
  GroupedGemm(p);
  const auto g1 = y_mixed.Download(), g2 = y_mma.Download();
  const std::vector<float> s1(g1.begin(), g1.begin() + rows * N), s2(g2.begin(), g2.begin() + rows * N);
  ExpectClose("grouped_gemm_sm90_mixed_dispatch", "vs_emulation", s1, Reference(a, K, Dequant(w, false), off, N), 2e-4);
  ExpectClose("grouped_gemm_sm90_mixed_dispatch", "vs_mma_sync", s1, s2, 4e-3);
}

// Graph safety: capture the GEMM once, then change the device-side offsets (other group
// sizes, an emptied group) and replay: the result follows the new offsets.
TEST(CudaGroupedGemmSm90Mixed, GraphReplayFollowsDeviceOffsets) {
  SKIP_WITHOUT_MIXED();
  const int64_t E = 4, N = 256, K = 512, max_rows = 400;
  const std::vector<int32_t> off1{0, 100, 100, 250, 330}, off2{0, 7, 207, 207, 399};
  const auto a = RoundBf16Vec(RandomNormal(max_rows * K));
  const Fp8Weights w = MakeWeights(E, N, K);
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<uint8_t> dw(w.q);
  Dev<float> ds(w.s), y(max_rows * N);
  Dev<int32_t> doff(off1);
  GroupedGemmParams p{};
  p.a = da.get(); p.lda = K; p.offsets = doff.get(); p.max_rows = max_rows; p.w = dw.get(); p.w_fp8 = true;
  p.w_scales = ds.get(); p.num_experts = E; p.N = N; p.K = K; p.out = y.get(); p.out_type = DTypeOut::kF32; p.ldo = N;
  const size_t wsb = GroupedGemmSm90MixedWorkspaceBytes(E, N, K);
  Dev<uint8_t> ws(wsb);
  p.workspace = ws.get(); p.workspace_bytes = wsb;
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreate(&st));
  p.stream = st;
  GroupedGemmSm90Mixed(p);  // eager first (CUTLASS's one-time host setup outside the capture)
  DS_CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  GroupedGemmSm90Mixed(p);
  DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const auto wd = Dequant(w, false);
  for (const auto* off : {&off1, &off2}) {
    doff.Upload(*off);
    y.Poison();
    DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    const int64_t rows = off->back();
    const auto full = y.Download();
    int64_t stray = 0;
    const auto got = Extract(full, rows, max_rows, N, N, &stray);
    EXPECT_EQ(stray, 0);
    ExpectClose("grouped_gemm_sm90_mixed_graph", off == &off1 ? "replay_offsets1" : "replay_offsets2", got,
                Reference(a, K, wd, *off, N), 2e-4);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace ds::cuda::test
