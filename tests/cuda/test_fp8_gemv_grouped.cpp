// Grouped FP8 GEMV for the MoE experts at decode sizes (fp8_gemv_grouped.h) against a CPU
// double-precision reference on the same bf16 activations and e4m3 expert weights with
// 128x128 block scales, and against SkinnyGemm's grouped form (skinny_gemm.h) on the same
// inputs: DeepSeek-V3's expert shapes (gate_up N = 4096 K = 7168, down N = 7168 K = 2048) with
// 256 experts, of which 8..64 are non-empty with 1..8 rows each (decode batches of 1, 4 and 8
// tokens routed top-8 at random; 64 experts x 1 row; one expert holding all 8 rows), the
// host's bound max_active_groups as the runner passes it (min(E, tokens x 8)) and at E; odd
// shapes (N not a multiple of the 128-row tile: the last tile's box reads the next expert's
// rows; half a scale block of K; K < 128; strided a / out; bf16 out); the generic path (K % 16
// != 0, a misaligned weight pointer, more slots than the TMA path's table); CTA counts that cut
// tiles anywhere (1, 7, SMs, 2 x SMs, more than the units, more CTAs than the non-empty groups'
// units); one workspace reused across launches of different slot counts; a CUDA-graph capture
// replayed (bitwise equal to eager, then with new offsets and activations); empty launches and
// a max_active_groups below the non-empty groups; bad inputs.
//
// Every launch writes into a NaN-poisoned output and reads NaN activation padding
// (gemv_grouped_test_util.h, shared with the bf16-weight test).
//
// Bounds (fp8_gemv.h's test, the same math): fp32 out 2e-5 relative L2 (exact products, fp32
// sums), bf16 out 5e-3 (the final rounding), vs SkinnyGemm 4e-5 (both within 2e-5 of the
// reference). Written without a GPU; session 7 run 11 (H200): every case that ran passed, and the
// 64 x 1 layout stopped V3ExpertsMatchReferenceAndSkinny on its own bug (65 experts), since fixed.
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

constexpr double kBoundF32 = 2e-5, kBoundBf16 = 5e-3, kBoundVsSkinny = 4e-5;
constexpr GroupedOp kOp{"fp8_gemv_grouped", kBoundF32, kBoundBf16};

// E experts of e4m3 weights [E, N, K] filled on the device (FillE4M3: every finite code) and
// block scales [E, ceil(N/128), ceil(K/128)] uniform in [0.5, 2) x 2^-9.
struct Experts {
  Experts(int64_t E_, int64_t N_, int64_t K_)
      : E(E_), N(N_), K(K_), nb((N_ + 127) / 128), kb((K_ + 127) / 128), q(static_cast<size_t>(E_ * N_ * K_)),
        s(RandomF(E_ * nb * kb, 0.5f, 2.0f)) {
    for (auto& v : s) v *= std::ldexp(1.f, -9);
    ds = std::make_unique<Dev<float>>(s);
    FillE4M3(q.get(), E * N * K, NextSeed());
    DS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<uint8_t> Host(int64_t e) const {  // expert e's [N, K] bytes
    std::vector<uint8_t> h(N * K);
    DS_CUDA_CHECK(cudaMemcpy(h.data(), q.get() + e * N * K, h.size(), cudaMemcpyDeviceToHost));
    return h;
  }
  void Set(Fp8GemvGroupedParams* p) const { p->w = q.get(); p->w_scales = ds->get(); }
  void SetSkinny(GroupedGemmParams* g) const { g->w = q.get(); g->w_fp8 = true; g->w_scales = ds->get(); }
  std::vector<float> Reference(const std::vector<float>& a, int64_t lda, const std::vector<int32_t>& off,
                               int64_t max_groups) const;
  int64_t E, N, K, nb, kb;
  Dev<uint8_t> q;
  std::vector<float> s;
  std::unique_ptr<Dev<float>> ds;
};

// ref[r, n] for the rows r of every group e (< off[E]): sum_kb s[e, n/128, kb] * sum_{k in kb}
// a[r, k] * e4m3(w[e, n, k]), in double. With max_groups >= 0 only the first max_groups
// non-empty groups (the others' rows stay NaN).
std::vector<float> Experts::Reference(const std::vector<float>& a, int64_t lda, const std::vector<int32_t>& off,
                                      int64_t max_groups) const {
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = Fp8E4M3ToF32(static_cast<uint8_t>(i));
  std::vector<float> ref(static_cast<size_t>(off.back()) * N, kGroupedNaN);
  int64_t done = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = off[e], rows = off[e + 1] - off[e];
    if (rows <= 0) continue;
    if (max_groups >= 0 && done++ >= max_groups) break;
    DS_CHECK(rows <= 8) << "test reference: " << rows << " rows in one group";
    const std::vector<uint8_t> w = Host(e);
    ParallelFor(N, [&](int64_t n) {
      const uint8_t* wr = w.data() + n * K;
      double acc[8] = {};
      for (int64_t b = 0; b < kb; ++b) {
        double part[8] = {};
        for (int64_t k = b * 128; k < std::min(K, b * 128 + 128); ++k) {
          const double wk = lut[wr[k]];
          for (int64_t r = 0; r < rows; ++r) part[r] += double(a[(r0 + r) * lda + k]) * wk;
        }
        const double sc = s[(e * nb + n / 128) * kb + b];
        for (int64_t r = 0; r < rows; ++r) acc[r] += sc * part[r];
      }
      for (int64_t r = 0; r < rows; ++r) ref[(r0 + r) * N + n] = static_cast<float>(acc[r]);
    });
  }
  return ref;
}

using Case = GroupedCase<Experts>;

std::vector<float> RunCase(const std::string& name, Case& c, Workspace& ws, int64_t max_active, bool bf16_out = false,
                           int ctas = 0, bool expect_tma = true) {
  return RunGroupedCase(kOp, name, c, ws, max_active, bf16_out, ctas, expect_tma);
}

std::vector<float> RunSkinny(Case& c, int64_t max_active) { return RunSkinnyGrouped(c, max_active); }

// Group sizes: `tokens` tokens routed top-8 at random over E experts (RoutedCounts).
std::vector<int32_t> Routed(int64_t tokens, int64_t E) { return RoutedCounts(tokens, 8, E); }

// The runner's bound for a batch of `tokens` tokens, top-8: min(E, tokens x 8).
int64_t ActiveBound(int64_t tokens, int64_t E) { return std::min<int64_t>(E, tokens * 8); }

TEST(CudaFp8GemvGrouped, V3ExpertsMatchReferenceAndSkinny) {
  struct Shape { const char* name; int64_t N, K; };
  for (const Shape& sh : {Shape{"gate_up", 4096, 7168}, Shape{"down", 7168, 2048}}) {
    const int64_t E = 256;
    const Experts x(E, sh.N, sh.K);
    Workspace ws;  // one workspace for every layout below (different slot counts)
    struct Layout { std::string name; std::vector<int32_t> rows; int64_t tokens; };
    std::vector<Layout> layouts;
    layouts.push_back({"t1", Routed(1, E), 1});  // 8 experts x 1 row
    layouts.push_back({"t4", Routed(4, E), 4});  // <= 32 experts, 1..4 rows
    layouts.push_back({"t8", Routed(8, E), 8});  // <= 64 experts, 1..8 rows
    {
      std::vector<int32_t> r(E, 0);  // one expert with all 8 rows of a batch (the others empty)
      r[201] = 8;
      layouts.push_back({"one_expert_8rows", r, 8});
    }
    {
      // 64 experts x 1 row, spread: the first and last expert and 62 distinct ones in between
      // (i * 4 + i % 3 for i = 1..62: 5..250). Session 7 run 11 had 64 spread ones plus the last
      // expert, 65 > the bound of 64: the ASSERT below stopped the test there.
      std::vector<int32_t> r(E, 0);
      for (int i = 1; i <= 62; ++i) r[i * 4 + (i % 3)] = 1;
      r[0] = r[255] = 1;
      layouts.push_back({"act64x1", r, 8});
    }
    {
      std::vector<int32_t> r(E, 0);  // 8 rows in the first and last expert, 1..7 in between
      r[0] = 8; r[255] = 8; r[17] = 3; r[18] = 1; r[100] = 7; r[254] = 5;
      layouts.push_back({"full_first_last", r, 8});
    }
    for (const Layout& l : layouts) {
      Case c(x, l.rows, 0, 0);
      const std::string name = std::string("v3_") + sh.name + "_" + l.name;
      const int64_t bound = ActiveBound(l.tokens, E);
      ASSERT_LE(c.active, bound) << name;
      const std::vector<float> got = RunCase(name, c, ws, bound);
      const std::vector<float> sk = RunSkinny(c, bound);
      ExpectClose("fp8_gemv_grouped_vs_skinny", name, got, sk, kBoundVsSkinny);
      ExpectClose("skinny_gemm_grouped_fp8", name, sk, c.ref, kBoundF32);
      if (l.name == "t8") {
        RunCase(name + "_maxactiveE", c, ws, 0);  // slots = E: the empty slots' units are never made
        RunCase(name, c, ws, bound, /*bf16_out=*/true);
      }
    }
  }
}

TEST(CudaFp8GemvGrouped, OddShapesAndGenericPath) {
  Workspace ws;
  {  // N = 200 (a 72-row last tile whose box reads the next expert's rows), K = 7168 + 64,
     // strided a / out, empty groups first and last
    const Experts x(5, 200, 7232);
    Case c(x, {0, 3, 8, 1, 0}, 8, 3);
    RunCase("N200_K7232_strided", c, ws, 3);
    RunCase("N200_K7232_strided", c, ws, 3, true);
    RunCase("N200_K7232_strided", c, ws, 0);
  }
  {  // K < 128 (one partial unit per tile: the second activation box wholly out of bounds), a
     // 2-row last tile
    const Experts x(3, 130, 16);
    Case c(x, {2, 0, 5}, 0, 1);
    RunCase("N130_K16", c, ws, 2);
  }
  {  // N = 1000, K = 1408 (11 units per tile), bf16 and fp32 out
    const Experts x(6, 1000, 1408);
    Case c(x, {1, 4, 0, 0, 8, 2}, 0, 5);
    RunCase("N1000_K1408", c, ws, 6);
    RunCase("N1000_K1408", c, ws, 6, true);
  }
  {  // K = 200: not a multiple of 16, the generic path
    const Experts x(4, 300, 200);
    Case c(x, {1, 0, 8, 3}, 3, 2);
    RunCase("N300_K200_generic", c, ws, 4, false, 0, /*expect_tma=*/false);
    RunCase("N300_K200_generic", c, ws, 4, true, 0, false);
  }
  CheckSlotsBeyondTheTable(kOp, Experts(1100, 64, 256), ws);
}

// The same experts through the TMA path and, copied to an address 8 bytes past a 16-byte
// boundary, through the generic path: both match the reference and each other.
TEST(CudaFp8GemvGrouped, MisalignedWeightsTakeTheGenericPath) {
  const Experts x(8, 384, 1024);
  Workspace ws;
  Case c(x, {2, 0, 7, 1, 0, 0, 4, 3}, 0, 0);
  const std::vector<float> tma = RunCase("N384_K1024", c, ws, 8);
  Dev<uint8_t> shifted(x.q.size() + 16);
  DS_CUDA_CHECK(cudaMemcpy(shifted.get() + 8, x.q.get(), x.q.size(), cudaMemcpyDeviceToDevice));
  Fp8GemvGroupedParams p = c.Params(8, false, 0, ws);
  p.w = shifted.get() + 8;
  EXPECT_FALSE(Fp8GemvGroupedPlanFor(p).tma);
  const std::vector<float> gen = LaunchInto(c, p);
  ExpectClose("fp8_gemv_grouped_generic", "N384_K1024_w+8", gen, c.ref, kBoundF32);
  ExpectClose("fp8_gemv_grouped_generic_vs_tma", "N384_K1024", gen, tma, kBoundVsSkinny);
}

// Forced CTA counts: one CTA (every unit, whole tiles only), 7 (tiles cut mid-way, CTAs
// spanning slots), one and two per SM, more than the host's units (capped), and more CTAs than
// the non-empty groups' units (the extra CTAs exit). Each within the bound; the sums differ in
// order only. The plan's units count the slots of the host's bound.
TEST(CudaFp8GemvGrouped, CtaCountsCutTilesAnywhere) {
  {
    const Experts x(64, 7168, 2048);  // V3 down: 56 tiles x 16 units per expert
    Workspace ws;
    std::vector<int32_t> rows(64, 0);
    for (int i = 0; i < 16; ++i) rows[(i * 5 + 2) % 64] = 1 + i % 4;
    Case c(x, rows, 0, 0);
    CheckCtaSweep(kOp, "down_E64_act16", c, ws, 16, 16 * 56 * 16, kBoundVsSkinny);
  }
  {
    const Experts x(16, 4096, 7168);  // V3 gate_up shape, 3 of 16 experts
    Workspace ws;
    std::vector<int32_t> rows(16, 0);
    rows[2] = 1; rows[9] = 8; rows[15] = 3;
    Case c(x, rows, 0, 0);
    for (int ctas : {7, 37}) RunCase("gate_up_E16_act3", c, ws, 16, false, ctas);
  }
  CheckOneGroupSevenCtas(kOp, "N256_K256_act1_ctas7", Experts(8, 256, 256));
}

// The workspace's size and layout do not depend on max_active_groups; a TMA launch of any
// bound works with Fp8GemvGroupedWorkspaceBytes(E, N, K).
TEST(CudaFp8GemvGrouped, WorkspaceIndependentOfTheBound) {
  CheckWorkspaceIndependentOfTheBound(kOp, "E32_N1024_K2048_t2", Experts(32, 1024, 2048), Routed(2, 32),
                                      /*w_bf16=*/false, {1, 8, 16, 32, 0}, {16, 0, 16, 32});
}

// Captured once in a CUDA graph: two replays equal the eager launch bit for bit; then new
// device offsets (other experts, other row counts within the capture's bounds) and new
// activations: the replay equals a new eager launch bit for bit and matches the reference (the
// op reads the offsets at replay time; its counters reset themselves).
TEST(CudaFp8GemvGrouped, GraphReplayMatchesEager) {
  const int64_t E = 32;
  const Experts x(E, 1536, 2048);
  std::vector<int32_t> rows_a(E, 0), rows_b(E, 0);
  rows_a[1] = 3; rows_a[4] = 3; rows_a[30] = 2; rows_a[31] = 1;  // 9 rows in 4 groups
  rows_b[0] = 1; rows_b[7] = 8;                                 // 9 rows in 2 groups
  CheckGraphReplay(kOp, x, rows_a, rows_b, /*bound=*/4);
}

// No non-empty group (no CTA has a unit), an empty launch, and a host bound below the
// non-empty groups (only the first `bound` non-empty groups are computed, as SkinnyGemm's
// slots; the others' rows stay untouched).
TEST(CudaFp8GemvGrouped, EmptyGroupsAndBounds) {
  const Experts x(12, 512, 1024), xg(12, 96, 200);  // TMA path; K = 200: the generic path
  CheckEmptyGroupsAndBounds(kOp, x, xg);
}

TEST(CudaFp8GemvGrouped, RejectsBadInput) {
  Fp8GemvGroupedParams p;
  p.num_experts = 4; p.N = 256; p.K = 512; p.lda = 512; p.ldo = 256; p.max_rows = 8;
  for (int64_t r : {-1, 9, 16}) {
    p.max_group_rows = r;
    EXPECT_THROW(Fp8GemvGroupedPlanFor(p), CheckError) << r;
    EXPECT_THROW(Fp8GemvGrouped(p), CheckError) << r;
  }
  p.max_group_rows = 8;
  p.num_experts = 0;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.num_experts = 4; p.N = 0;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.N = 256; p.K = 0;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.K = 512; p.lda = 256;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.lda = 512; p.ldo = 100;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.ldo = 256; p.max_active_groups = -1;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);
  p.max_active_groups = 0;
  EXPECT_THROW(Fp8GemvGrouped(p), CheckError);  // null pointers
  EXPECT_THROW(Fp8GemvGroupedWorkspaceBytes(0, 256, 512), CheckError);
  EXPECT_THROW(Fp8GemvGroupedWorkspaceBytes(4, 256, 0), CheckError);
  // The TMA path without (enough) workspace.
  const Experts x(4, 256, 512);
  Case c(x, {1, 0, 2, 0}, 0, 0);
  CheckWorkspaceRequired(c, 2);
}

// Gathered rows (a_rows; the batch-1 gate_up after MoeRouterRoute): V3's gate_up with a token's
// 8 experts reading its one row, and 3 source rows over 12 experts.
TEST(CudaFp8GemvGrouped, GatheredRowsMatchPermutedCopy) {
  std::vector<int32_t> eight(256, 0);
  for (int e : {0, 7, 64, 65, 130, 200, 201, 255}) eight[e] = 1;
  CheckGatheredRows(kOp, "v3_gate_up_t1", Experts(256, 4096, 7168), eight, 1);
  std::vector<int32_t> twelve(16, 1);
  twelve[2] = twelve[9] = twelve[15] = twelve[7] = 0;
  CheckGatheredRows(kOp, "v3_down_12x1", Experts(16, 7168, 2048), twelve, 3);
}

}  // namespace
}  // namespace ds::cuda::test
