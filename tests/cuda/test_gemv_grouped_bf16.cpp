// The grouped GEMV with bf16 expert weights (fp8_gemv_grouped.h, Fp8GemvGroupedParams::w_bf16;
// the runner's gemv_experts_bf16) against a CPU double-precision reference on the same bf16
// activations and bf16 weights, and against SkinnyGemm's grouped form (skinny_gemm.h) on the
// same inputs: DeepSeek-V2-Lite's expert shapes (gate_up N = 2816 K = 2048, down N = 2048 K =
// 1408; 64 routed experts, top-6) with 1 token x 6 experts, 8 tokens x 6 (routed at random),
// 48 experts x 1 row, one expert with all 8 rows, the host's bound max_active_groups as the
// runner passes it (min(E, tokens x 6)) and at E, bf16 out; the runner's stacked shared experts
// (groups 64 and 65 with every token's row, bound + 2); odd shapes (N not a multiple of the
// 128-row tile; K a multiple of 8 but not of 64: the last unit's k past K zero-filled; K = 8;
// K % 16 != 0, which the e4m3 form sends to the generic path and the bf16 form does not;
// strided a / out); the generic path (K % 8 != 0, lda % 8 != 0, a misaligned weight pointer,
// more slots than the TMA path's table); CTA counts that cut tiles anywhere; one workspace reused
// across launches of different bounds; a CUDA-graph capture replayed (bitwise equal to eager,
// then with new offsets and activations); empty launches and a bound below the non-empty groups;
// bad inputs. Poisoned outputs and NaN activation padding as gemv_grouped_test_util.h says.
//
// Bounds: fp32 out 1e-5 relative L2 (exact bf16 products in fp32, fp32 sums over K <= 2056: the
// MMA's fp32 accumulation order only), bf16 out 5e-3 (the final rounding), vs SkinnyGemm 2e-5.
// Written without a GPU; passed on its first H200 run (session 8 run 3). What to look at first if it fails: a case failing
// at every shape with rel_l2 ~ 1 (a wrong fragment layout: StageMmaBf16's comment in
// fp8_gemv_common.cuh); only the K % 64 != 0 shapes (the last unit's zero fill); only split
// tiles (CtaCountsCutTilesAnywhere at 1 CTA passing, 7 failing: the unit count per tile).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/device_props.h"
#include "backend/cuda/fill_random.h"
#include "backend/cuda/fp8_gemv_grouped.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "gemv_grouped_test_util.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kBoundF32 = 1e-5, kBoundBf16 = 5e-3, kBoundVsSkinny = 2e-5;
constexpr GroupedOp kOp{"gemv_grouped_bf16", kBoundF32, kBoundBf16};
constexpr int64_t kTopK = 6;  // V2-Lite's num_experts_per_tok

// E experts of bf16 weights [E, N, K], uniform in [-1, 1) (filled on the device), at an offset
// of `shift_elems` elements into the allocation (4: 8 bytes past a 16-byte boundary).
struct Bf16Experts {
  Bf16Experts(int64_t E_, int64_t N_, int64_t K_, int64_t shift_elems = 0)
      : E(E_), N(N_), K(K_), shift(shift_elems), buf(static_cast<size_t>(E_ * N_ * K_ + shift_elems)) {
    FillUniformBf16(buf.get() + shift, E * N * K, NextSeed(), -1.f, 1.f);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const __nv_bfloat16* w() const { return buf.get() + shift; }
  std::vector<float> Host(int64_t e) const {  // expert e's [N, K] as floats
    std::vector<__nv_bfloat16> h(N * K);
    DS_CUDA_CHECK(cudaMemcpy(h.data(), w() + e * N * K, h.size() * 2, cudaMemcpyDeviceToHost));
    return FromBf16(h);
  }
  void Set(Fp8GemvGroupedParams* p) const { p->w = w(); p->w_bf16 = true; p->w_scales = nullptr; }
  void SetSkinny(GroupedGemmParams* g) const { g->w = w(); g->w_fp8 = false; g->w_scales = nullptr; }
  // ref[r, n] = sum_k a[r, k] * w[e, n, k] in double for the rows r of every non-empty group e
  // (only the first max_groups of them with max_groups >= 0; other rows NaN).
  std::vector<float> Reference(const std::vector<float>& a, int64_t lda, const std::vector<int32_t>& off,
                               int64_t max_groups) const {
    std::vector<float> ref(static_cast<size_t>(off.back()) * N, kGroupedNaN);
    int64_t done = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t r0 = off[e], rows = off[e + 1] - off[e];
      if (rows <= 0) continue;
      if (max_groups >= 0 && done++ >= max_groups) break;
      DS_CHECK(rows <= 8) << "test reference: " << rows << " rows in one group";
      const std::vector<float> wh = Host(e);
      ParallelFor(N, [&](int64_t n) {
        const float* wr = wh.data() + n * K;
        double acc[8] = {};
        for (int64_t k = 0; k < K; ++k)
          for (int64_t r = 0; r < rows; ++r) acc[r] += double(a[(r0 + r) * lda + k]) * double(wr[k]);
        for (int64_t r = 0; r < rows; ++r) ref[(r0 + r) * N + n] = static_cast<float>(acc[r]);
      });
    }
    return ref;
  }
  int64_t E, N, K, shift;
  Dev<__nv_bfloat16> buf;
};

using Case = GroupedCase<Bf16Experts>;

std::vector<float> RunCase(const std::string& name, Case& c, Workspace& ws, int64_t max_active, bool bf16_out = false,
                           int ctas = 0, bool expect_tma = true) {
  return RunGroupedCase(kOp, name, c, ws, max_active, bf16_out, ctas, expect_tma);
}

// The runner's bound for a batch of `tokens` tokens routed top-6 over E routed experts.
int64_t ActiveBound(int64_t tokens, int64_t E) { return std::min<int64_t>(E, tokens * kTopK); }

// Checks c against the reference (RunCase) and SkinnyGemm's grouped form (both within bounds).
void RunWithSkinny(const std::string& name, Case& c, Workspace& ws, int64_t bound) {
  const std::vector<float> got = RunCase(name, c, ws, bound);
  const std::vector<float> sk = RunSkinnyGrouped(c, bound);
  ExpectClose("gemv_grouped_bf16_vs_skinny", name, got, sk, kBoundVsSkinny);
  ExpectClose("skinny_gemm_grouped_bf16", name, sk, c.ref, kBoundVsSkinny);
}

TEST(CudaGemvGroupedBf16, V2LiteExpertsMatchReferenceAndSkinny) {
  struct Shape { const char* name; int64_t N, K; };
  for (const Shape& sh : {Shape{"gate_up", 2816, 2048}, Shape{"down", 2048, 1408}}) {
    const int64_t E = 64;
    const Bf16Experts x(E, sh.N, sh.K);
    Workspace ws;  // one workspace for every layout below (different slot counts)
    struct Layout { std::string name; std::vector<int32_t> rows; int64_t tokens; };
    std::vector<Layout> layouts;
    layouts.push_back({"t1", RoutedCounts(1, kTopK, E), 1});  // 6 experts x 1 row
    layouts.push_back({"t8", RoutedCounts(8, kTopK, E), 8});  // <= 48 experts, 1..8 rows
    {
      std::vector<int32_t> r(E, 0);  // 48 distinct experts x 1 row (8 tokens, no expert shared)
      for (int i = 0; i < 48; ++i) r[(i * 4) / 3] = 1;  // 0, 1, 2, 4, 5, 6, 8, ..., 62
      layouts.push_back({"act48x1", r, 8});
    }
    {
      std::vector<int32_t> r(E, 0);  // one expert with all 8 rows of a batch (the others empty)
      r[37] = 8;
      layouts.push_back({"one_expert_8rows", r, 8});
    }
    {
      std::vector<int32_t> r(E, 0);  // 8 rows in the first and last expert, 1..7 in between
      r[0] = 8; r[63] = 8; r[17] = 3; r[18] = 1; r[40] = 7; r[62] = 5;
      layouts.push_back({"full_first_last", r, 8});
    }
    for (const Layout& l : layouts) {
      Case c(x, l.rows, 0, 0);
      const std::string name = std::string("v2lite_") + sh.name + "_" + l.name;
      const int64_t bound = ActiveBound(l.tokens, E);
      ASSERT_LE(c.active, bound) << name;
      RunWithSkinny(name, c, ws, bound);
      if (l.name == "t8") {
        RunCase(name + "_maxactiveE", c, ws, 0);  // slots = E: the empty slots' units are never made
        RunCase(name, c, ws, bound, /*bf16_out=*/true);
      }
    }
  }
}

// The runner with fused_moe_shared stacks V2-Lite's 2 shared experts as groups 64 and 65 (every
// token's row in each), bound min(64, tokens x 6) + 2; V2-Lite has shared experts, so the down
// projection's output is fp32 there.
TEST(CudaGemvGroupedBf16, V2LiteStackedSharedGroups) {
  const int64_t E = 64, S = 2;
  const Bf16Experts x(E + S, 2048, 1408);
  Workspace ws;
  for (int64_t tokens : {1, 8}) {
    std::vector<int32_t> rows = RoutedCounts(tokens, kTopK, E);
    for (int64_t s = 0; s < S; ++s) rows.push_back(static_cast<int32_t>(tokens));
    Case c(x, rows, 0, 0);
    RunWithSkinny("v2lite_down_stacked_t" + std::to_string(tokens), c, ws, ActiveBound(tokens, E) + S);
  }
}

TEST(CudaGemvGroupedBf16, OddShapesAndGenericPath) {
  Workspace ws;
  {  // N = 200 (a 72-row last tile whose box reads the next expert's rows), K = 2048 + 8 (the
     // last unit holds 8 k), strided a / out, empty groups first and last
    const Bf16Experts x(5, 200, 2056);
    Case c(x, {0, 3, 8, 1, 0}, 8, 3);
    RunCase("N200_K2056_strided", c, ws, 3);
    RunCase("N200_K2056_strided", c, ws, 3, true);
    RunCase("N200_K2056_strided", c, ws, 0);
  }
  {  // K = 8 (one unit per tile, 56 of its 64 k zero-filled), a 2-row last tile
    const Bf16Experts x(3, 130, 8);
    Case c(x, {2, 0, 5}, 0, 1);
    RunCase("N130_K8", c, ws, 2);
  }
  {  // N = 1000, K = 1408 (22 units per tile), bf16 and fp32 out
    const Bf16Experts x(6, 1000, 1408);
    Case c(x, {1, 4, 0, 0, 8, 2}, 0, 5);
    RunCase("N1000_K1408", c, ws, 6);
    RunCase("N1000_K1408", c, ws, 6, true);
  }
  {  // K = 200 (a multiple of 8, not of 16 or 64): the TMA path with lda = 208; lda = 203: generic
    const Bf16Experts x(4, 300, 200);
    Case c(x, {1, 0, 8, 3}, 8, 2);
    RunCase("N300_K200", c, ws, 4);
    Case cg(x, {1, 0, 8, 3}, 3, 2);
    RunCase("N300_K200_lda203_generic", cg, ws, 4, false, 0, /*expect_tma=*/false);
  }
  {  // K = 203: not a multiple of 8, the generic path
    const Bf16Experts x(4, 300, 203);
    Case c(x, {1, 0, 8, 3}, 5, 2);
    RunCase("N300_K203_generic", c, ws, 4, false, 0, false);
    RunCase("N300_K203_generic", c, ws, 4, true, 0, false);
  }
  CheckSlotsBeyondTheTable(kOp, Bf16Experts(1100, 64, 256), ws);
}

// The same experts through the TMA path and, 8 bytes past a 16-byte boundary, through the
// generic path: both match the reference and each other.
TEST(CudaGemvGroupedBf16, MisalignedWeightsTakeTheGenericPath) {
  const Bf16Experts x(8, 384, 1024), xs(8, 384, 1024, /*shift_elems=*/4);
  Workspace ws;
  Case c(x, {2, 0, 7, 1, 0, 0, 4, 3}, 0, 0);
  const std::vector<float> tma = RunCase("N384_K1024", c, ws, 8);
  // xs's weights: x's copied to the shifted address.
  DS_CUDA_CHECK(cudaMemcpy(xs.buf.get() + xs.shift, x.w(), x.E * x.N * x.K * 2, cudaMemcpyDeviceToDevice));
  Fp8GemvGroupedParams p = c.Params(8, false, 0, ws);
  xs.Set(&p);
  EXPECT_FALSE(Fp8GemvGroupedPlanFor(p).tma);
  const std::vector<float> gen = LaunchInto(c, p);
  ExpectClose("gemv_grouped_bf16_generic", "N384_K1024_w+8B", gen, c.ref, kBoundF32);
  ExpectClose("gemv_grouped_bf16_generic_vs_tma", "N384_K1024", gen, tma, kBoundVsSkinny);
}

// Forced CTA counts: one CTA (every unit, whole tiles only), 7 (tiles cut mid-way, CTAs
// spanning slots), one and two per SM, more than the host's units (capped), and more CTAs than
// the non-empty groups' units (the extra CTAs exit). The plan's units count the slots of the
// host's bound and 64-k units.
TEST(CudaGemvGroupedBf16, CtaCountsCutTilesAnywhere) {
  {
    const Bf16Experts x(64, 2048, 1408);  // V2-Lite down: 16 tiles x 22 units per expert
    Workspace ws;
    std::vector<int32_t> rows(64, 0);
    for (int i = 0; i < 16; ++i) rows[(i * 3 + 1) % 64] = 1 + i % 8;  // 16 experts, 1..8 rows
    Case c(x, rows, 0, 0);
    CheckCtaSweep(kOp, "down_E64_act16", c, ws, 16, 16 * 16 * 22, kBoundVsSkinny);
  }
  {
    const Bf16Experts x(16, 2816, 2048);  // V2-Lite gate_up shape, 3 of 16 experts
    Workspace ws;
    std::vector<int32_t> rows(16, 0);
    rows[2] = 1; rows[9] = 8; rows[15] = 3;
    Case c(x, rows, 0, 0);
    for (int ctas : {7, 37}) RunCase("gate_up_E16_act3", c, ws, 16, false, ctas);
  }
  CheckOneGroupSevenCtas(kOp, "N256_K128_act1_ctas7", Bf16Experts(8, 256, 128));
}

// The workspace's size and layout do not depend on max_active_groups; a TMA launch of any bound
// works with Fp8GemvGroupedWorkspaceBytes(E, N, K, 0, true).
TEST(CudaGemvGroupedBf16, WorkspaceIndependentOfTheBound) {
  CheckWorkspaceIndependentOfTheBound(kOp, "E32_N1024_K2048_t2", Bf16Experts(32, 1024, 2048),
                                      RoutedCounts(2, kTopK, 32), /*w_bf16=*/true, {1, 6, 12, 32, 0}, {12, 0, 12, 32});
}

// V2-Lite gate_up, 8 tokens x 6 experts captured with the runner's bound 48; replayed with
// another routing of 8 tokens (48 rows again) and new activations.
TEST(CudaGemvGroupedBf16, GraphReplayMatchesEager) {
  const int64_t E = 64;
  const Bf16Experts x(E, 2816, 2048);
  CheckGraphReplay(kOp, x, RoutedCounts(8, kTopK, E), RoutedCounts(8, kTopK, E), ActiveBound(8, E));
}

TEST(CudaGemvGroupedBf16, EmptyGroupsAndBounds) {
  const Bf16Experts x(12, 512, 1024), xg(12, 96, 203);  // TMA path; K = 203: the generic path
  CheckEmptyGroupsAndBounds(kOp, x, xg);
}

TEST(CudaGemvGroupedBf16, PlanAndBadInput) {
  Fp8GemvGroupedParams p;
  p.num_experts = 4; p.N = 256; p.K = 200; p.lda = 200; p.ldo = 256; p.max_rows = 8; p.max_active_groups = 4;
  p.w_bf16 = true;
  // Units of 64 k (4 per tile for K = 200), and K % 16 != 0 takes the TMA path with bf16
  // weights only (null pointers count as 16-byte aligned).
  Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
  EXPECT_EQ(plan.units, 4 * 2 * 4);
  EXPECT_EQ(plan.tma, CurrentDeviceProps().sm90);
  p.w_bf16 = false;
  plan = Fp8GemvGroupedPlanFor(p);
  EXPECT_EQ(plan.units, 4 * 2 * 2);
  EXPECT_FALSE(plan.tma);
  p.w_bf16 = true;
  p.K = 204; p.lda = 208;  // K % 8 != 0: generic
  EXPECT_FALSE(Fp8GemvGroupedPlanFor(p).tma);
  p.K = 200; p.lda = 200;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);  // null pointers (a, offsets, w, out)
  EXPECT_THROW(Fp8GemvGroupedWorkspaceBytes(0, 256, 512, 0, true), CheckError);
  EXPECT_THROW(Fp8GemvGroupedWorkspaceBytes(4, 256, 0, 0, true), CheckError);
  // No w_scales needed; w needed; the TMA path needs enough workspace.
  const Bf16Experts x(4, 256, 512);
  Workspace ws;
  Case c(x, {1, 0, 2, 0}, 0, 0);
  Fp8GemvGroupedParams q = c.Params(2, false, 0, ws);
  q.w = nullptr;
  EXPECT_THROW(Fp8GemvGrouped(q), CheckError);
  CheckWorkspaceRequired(c, 2);
  RunCase("N256_K512_no_scales", c, ws, 2, false, 0, Fp8GemvGroupedPlanFor(c.Params(2, false, 0, ws)).tma);
}

// Gathered rows (a_rows; the batch-1 gate_up after MoeRouterRoute): V2-Lite's gate_up with a
// token's 6 experts reading its one row, 3 source rows over 12 experts, and an odd K (the generic
// path).
TEST(CudaGemvGroupedBf16, GatheredRowsMatchPermutedCopy) {
  std::vector<int32_t> six(64, 0);
  for (int e : {3, 10, 11, 40, 41, 63}) six[e] = 1;
  CheckGatheredRows(kOp, "v2lite_gate_up_t1", Bf16Experts(64, 2816, 2048), six, 1);
  std::vector<int32_t> twelve(16, 1);
  twelve[2] = twelve[9] = twelve[15] = twelve[7] = 0;
  CheckGatheredRows(kOp, "v2lite_down_12x1", Bf16Experts(16, 2048, 1408), twelve, 3);
  CheckGatheredRows(kOp, "odd_k_generic", Bf16Experts(5, 200, 2052), std::vector<int32_t>{1, 0, 1, 1, 1}, 2);
}

}  // namespace
}  // namespace ds::cuda::test
