// FP8 GEMV for decode (fp8_gemv.h) against a CPU double-precision reference on the same bf16
// activations and e4m3 weights with 128x128 block scales: every DeepSeek-V3 dense projection
// at M = 1, 2, 4, 8 (and beside SkinnyGemm, its planned split-K path, on the same inputs); odd
// shapes (N not a multiple of the 128-row tile, K = 7168 + 64 and K < 128 on the TMA path, K =
// 200 and a misaligned weight pointer on the generic path, M = 3, strided a / out, bf16 out);
// CTA counts that cut tiles at every kind of boundary (the split-K partials and their
// last-arriver sum); bitwise determinism and self-resetting counters; a CUDA-graph capture
// replayed twice (and with new activations) against eager launches; PDL chains with the weights
// prefetched before the dependency wait; the plan's independence of M; bad inputs. Outputs are poisoned with NaN before each launch (an unwritten element
// fails the NaN check; columns past N must stay NaN).
//
// Bounds. fp32 out: the products are exact (e4m3 -> bf16 is exact, bf16 x bf16 is exact in the
// fp32 MMA), only the fp32 sums round: ~sqrt(terms) x 2^-24 relative for these random-sign sums
// (measured ~1e-7 .. 1e-6 for SkinnyGemm, the same math); 2e-5 relative L2 is SkinnyGemm's
// bound for it. bf16 out: the final rounding to bf16 adds <= 2^-9 relative per element (~1.1e-3
// RMS); 5e-3. Fp8Gemv vs SkinnyGemm (fp32 out): both within 2e-5 of the reference, so 4e-5.
// Written without a GPU; passes on the H200 (session 6 runs 10-11).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr double kBoundF32 = 2e-5, kBoundBf16 = 5e-3, kBoundVsSkinny = 4e-5;

// e4m3 weights [N, K] (RandomE4M3, test_util.h) and scales [ceil(N/128), ceil(K/128)] uniform
// in [0.5, 2) x 2^-9.
struct Fp8W {
  int64_t N = 0, K = 0;
  std::vector<uint8_t> q;
  std::vector<float> s;
};

Fp8W MakeW(int64_t N, int64_t K) {
  Fp8W w;
  w.N = N; w.K = K;
  const int64_t n = N * K, nb = (N + 127) / 128, kb = (K + 127) / 128;
  w.s = RandomF(nb * kb, 0.5f, 2.0f);
  for (auto& v : w.s) v *= std::ldexp(1.f, -9);
  w.q = RandomE4M3(n);
  return w;
}

// ref[r, n] = sum_kb s[n/128, kb] * sum_{k in kb} a[r, k] * e4m3(w[n, k]), double, rows 0..M-1.
std::vector<float> Reference(const Fp8W& w, const std::vector<float>& a, int64_t lda, int64_t M) {
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = Fp8E4M3ToF32(static_cast<uint8_t>(i));
  const int64_t KB = (w.K + 127) / 128;
  std::vector<float> ref(M * w.N);
  ParallelFor(w.N, [&](int64_t n) {
    const uint8_t* wr = w.q.data() + n * w.K;
    double acc[8] = {};
    for (int64_t kb = 0; kb < KB; ++kb) {
      double part[8] = {};
      for (int64_t k = kb * 128; k < std::min(w.K, kb * 128 + 128); ++k) {
        const double wk = lut[wr[k]];
        for (int64_t r = 0; r < M; ++r) part[r] += double(a[r * lda + k]) * wk;
      }
      const double sc = w.s[(n / 128) * KB + kb];
      for (int64_t r = 0; r < M; ++r) acc[r] += sc * part[r];
    }
    for (int64_t r = 0; r < M; ++r) ref[r * w.N + n] = static_cast<float>(acc[r]);
  });
  return ref;
}

// One weight on the device, bf16 activations [8, lda], its workspace (zeroed) and outputs
// [8, ldo] fp32 and bf16.
struct GemvCase {
  GemvCase(const Fp8W& w_, int64_t pad_a, int64_t pad_o, int ctas_ = 0)
      : w(w_), lda(w_.K + pad_a), ldo(w_.N + pad_o), ctas(ctas_),
        a(RoundBf16Vec(RandomNormal(8 * lda))), dq(w_.q), ds(w_.s), da(ToBf16(a)),
        ws(Fp8GemvWorkspaceBytes(w_.N, w_.K, ctas_)), o32(8 * ldo), o16(8 * ldo) {
    DS_CUDA_CHECK(cudaMemset(ws.get(), 0, ws.size()));
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // before launches on other streams
    ref = Reference(w, a, lda, 8);
  }
  Fp8GemvParams Params(int64_t M, bool bf16_out) const {
    Fp8GemvParams p;
    p.a = da.get(); p.lda = lda; p.w = dq.get(); p.w_scales = ds.get();
    p.out = bf16_out ? static_cast<void*>(o16.get()) : o32.get(); p.out_bf16 = bf16_out; p.ldo = ldo;
    p.M = M; p.N = w.N; p.K = w.K; p.workspace = ws.get(); p.workspace_bytes = ws.size(); p.ctas = ctas;
    return p;
  }
  // Output rows 0..M-1, columns 0..N-1 (downloaded); counts written columns past N.
  std::vector<float> Got(int64_t M, bool bf16_out, int64_t* extra) const {
    const std::vector<float> full = bf16_out ? FromBf16(o16.Download()) : o32.Download();
    std::vector<float> got(M * w.N);
    for (int64_t r = 0; r < M; ++r) {
      std::copy(full.begin() + r * ldo, full.begin() + r * ldo + w.N, got.begin() + r * w.N);
      for (int64_t n = w.N; n < ldo; ++n) *extra += !std::isnan(full[r * ldo + n]);
    }
    for (int64_t r = M; r < 8; ++r)  // rows past M must stay untouched too
      for (int64_t n = 0; n < ldo; ++n) *extra += !std::isnan(full[r * ldo + n]);
    return got;
  }
  std::vector<float> RefRows(int64_t M) const { return std::vector<float>(ref.begin(), ref.begin() + M * w.N); }
  bool CountersZero() const {
    const int64_t tiles = (w.N + 127) / 128;
    std::vector<uint32_t> c(tiles * 8);
    DS_CUDA_CHECK(cudaMemcpy(c.data(), ws.get(), c.size() * 4, cudaMemcpyDeviceToHost));
    return std::all_of(c.begin(), c.end(), [](uint32_t v) { return v == 0; });
  }
  const Fp8W& w;
  int64_t lda, ldo;
  int ctas;
  std::vector<float> a, ref;
  Dev<uint8_t> dq;
  Dev<float> ds;
  Dev<__nv_bfloat16> da;
  Dev<uint8_t> ws;
  Dev<float> o32;
  Dev<__nv_bfloat16> o16;
};

// Runs M rows twice (each time into a poisoned output): checks against the reference, bitwise
// equality of the two launches, untouched columns / rows and zeroed counters. Returns the
// output [M, N].
std::vector<float> RunCase(const std::string& name, GemvCase& su, int64_t M, bool bf16_out = false,
                           bool expect_tma = true) {
  const Fp8GemvParams p = su.Params(M, bf16_out);
  const Fp8GemvPlan plan = Fp8GemvPlanFor(p);
  EXPECT_EQ(plan.tma, expect_tma) << name;
  const std::string cas = name + "_M" + std::to_string(M) + (bf16_out ? "_bf16" : "_f32") +
                          (plan.tma ? "_tma_ctas" + std::to_string(plan.ctas) : "_generic");
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    su.o32.Poison();
    su.o16.Poison();
    Fp8Gemv(p);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    int64_t extra = 0;
    std::vector<float> got = su.Got(M, bf16_out, &extra);
    EXPECT_EQ(extra, 0) << cas << ": wrote past N or past M rows";
    if (rep == 0) {
      ExpectClose("fp8_gemv", cas, got, su.RefRows(M), bf16_out ? kBoundBf16 : kBoundF32);
      first = std::move(got);
    } else {
      EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * sizeof(float)), 0) << cas << ": not deterministic";
    }
    if (plan.tma) { EXPECT_TRUE(su.CountersZero()) << cas << ": split-K counters not reset"; }
  }
  return first;
}

// SkinnyGemm (dense FP8, its own plan: split-K where SkinnyPlanFor splits) on the same inputs.
std::vector<float> RunSkinny(GemvCase& su, int64_t M) {
  SkinnyGemmParams sp{};
  GroupedGemmParams& g = sp.g;
  g.a = su.da.get(); g.lda = su.lda; g.offsets = nullptr; g.max_rows = M; g.w = su.dq.get(); g.w_fp8 = true;
  g.w_scales = su.ds.get(); g.num_experts = 1; g.N = su.w.N; g.K = su.w.K; g.out = su.o32.get();
  g.out_type = DTypeOut::kF32; g.ldo = su.ldo;
  sp.max_group_rows = M;
  const SkinnyPlan plan = SkinnyPlanFor(sp);
  Dev<float> ws(std::max<int64_t>(1, plan.ws_floats));
  Dev<uint32_t> cnt(std::max<int64_t>(1, plan.counters));
  DS_CUDA_CHECK(cudaMemset(cnt.get(), 0, cnt.size() * 4));
  sp.splitk_ws = ws.get(); sp.splitk_ws_floats = static_cast<int64_t>(ws.size());
  sp.splitk_counters = cnt.get(); sp.splitk_counter_count = static_cast<int64_t>(cnt.size());
  su.o32.Poison();
  SkinnyGemm(sp);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  int64_t extra = 0;
  return su.Got(M, false, &extra);
}

struct Proj { const char* name; int64_t N, K; };
const Proj kV3[] = {
    {"q_a_proj", 1536, 7168},         {"q_b_proj", 24576, 1536},    {"kv_a_proj_with_mqa", 576, 7168},
    {"o_proj", 7168, 16384},          {"dense_gate_up", 36864, 7168}, {"dense_down", 7168, 18432},
    {"shared_gate_up", 4096, 7168},   {"shared_down", 7168, 2048},
};

TEST(CudaFp8Gemv, V3ProjectionsMatchReferenceAndSkinny) {
  for (const Proj& pr : kV3) {
    const Fp8W w = MakeW(pr.N, pr.K);
    GemvCase su(w, 0, 0);
    for (int64_t M : {1, 2, 4, 8}) {
      const std::string name = std::string("v3_") + pr.name;
      const std::vector<float> got = RunCase(name, su, M);
      const std::vector<float> sk = RunSkinny(su, M);
      ExpectClose("fp8_gemv_vs_skinny", name + "_M" + std::to_string(M), got, sk, kBoundVsSkinny);
      ExpectClose("skinny_gemm_fp8", name + "_M" + std::to_string(M), sk, su.RefRows(M), kBoundF32);
    }
  }
}

TEST(CudaFp8Gemv, OddShapes) {
  {  // N not a multiple of 128, K = 7168 + 64 (a half scale block), strided a / out, M = 3
    const Fp8W w = MakeW(200, 7232);
    GemvCase su(w, 8, 3);
    for (int64_t M : {1, 3, 8}) RunCase("N200_K7232_strided", su, M);
    RunCase("N200_K7232_strided", su, 3, /*bf16_out=*/true);
  }
  {  // N = 1000 (a 104-row last tile), bf16 and fp32 out
    const Fp8W w = MakeW(1000, 7168);
    GemvCase su(w, 0, 5);
    for (int64_t M : {3, 8}) {
      RunCase("N1000_K7168", su, M);
      RunCase("N1000_K7168", su, M, true);
    }
  }
  {  // K < 128 (one partial unit per tile) and a 2-row last tile
    const Fp8W w = MakeW(130, 16);
    GemvCase su(w, 0, 1);
    for (int64_t M : {1, 3, 8}) RunCase("N130_K16", su, M);
  }
  {  // K = 200: not a multiple of 16, the generic path
    const Fp8W w = MakeW(300, 200);
    GemvCase su(w, 3, 2);
    for (int64_t M : {1, 3, 8}) RunCase("N300_K200_generic", su, M, false, /*expect_tma=*/false);
    RunCase("N300_K200_generic", su, 3, true, false);
  }
}

// The same weights through the TMA path and through the generic path (the weights copied to
// an address 8 bytes past a 16-byte boundary): both match the reference and each other.
TEST(CudaFp8Gemv, MisalignedWeightsTakeTheGenericPath) {
  const Fp8W w = MakeW(384, 1024);
  GemvCase su(w, 0, 0);
  Dev<uint8_t> shifted(w.q.size() + 16);
  DS_CUDA_CHECK(cudaMemcpy(shifted.get() + 8, su.dq.get(), w.q.size(), cudaMemcpyDeviceToDevice));
  for (int64_t M : {2, 7}) {
    const std::vector<float> tma = RunCase("N384_K1024", su, M);
    Fp8GemvParams p = su.Params(M, false);
    p.w = shifted.get() + 8;
    EXPECT_FALSE(Fp8GemvPlanFor(p).tma);
    su.o32.Poison();
    Fp8Gemv(p);
    int64_t extra = 0;
    const std::vector<float> gen = su.Got(M, false, &extra);
    EXPECT_EQ(extra, 0);
    ExpectClose("fp8_gemv_generic", "N384_K1024_w+8_M" + std::to_string(M), gen, su.RefRows(M), kBoundF32);
    ExpectClose("fp8_gemv_generic_vs_tma", "N384_K1024_M" + std::to_string(M), gen, tma, kBoundVsSkinny);
  }
}

// Forced CTA counts on kv_a's shape (5 tiles x 56 units): one CTA (whole tiles only), counts
// that cut tiles in the middle and make CTAs span tile boundaries (2, 3, 7, 11), one per unit
// (56 contributors per tile), and more than the units (capped). Each within the bound; the
// sums differ only in order.
TEST(CudaFp8Gemv, CtaCountsCutTilesAnywhere) {
  const Fp8W w = MakeW(576, 7168);
  for (int ctas : {1, 2, 3, 7, 11, 56, 279, 280, 1000}) {
    GemvCase su(w, 0, 0, ctas);
    const Fp8GemvPlan plan = Fp8GemvPlanFor(su.Params(5, false));
    EXPECT_EQ(plan.units, 280);
    EXPECT_EQ(plan.ctas, std::min(ctas, 280));
    RunCase("kv_a_N576_K7168_ctas" + std::to_string(ctas), su, 5);
    RunCase("kv_a_N576_K7168_ctas" + std::to_string(ctas), su, 8, true);
  }
  {  // q_b's shape (K = 1536: 12 units per tile) with a count that is not a divisor
    const Fp8W wb = MakeW(2048, 1536);
    GemvCase su(wb, 0, 0, 37);
    RunCase("N2048_K1536_ctas37", su, 4);
  }
}

// Captured once in a CUDA graph: two replays equal the eager launch bit for bit, and a replay
// after new activations equals a new eager launch (the op reads its inputs at replay time; its
// split-K counters reset themselves, or a replay would never find its last arriver).
TEST(CudaFp8Gemv, GraphReplayMatchesEager) {
  const Fp8W w = MakeW(1536, 7168);  // q_a: split tiles at the auto CTA count
  GemvCase su(w, 0, 0);
  const int64_t M = 3;
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Fp8GemvParams p = su.Params(M, false);
  p.stream = st;
  su.o32.Poison();
  DS_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memset before the launch on st
  Fp8Gemv(p);
  DS_CUDA_CHECK(cudaStreamSynchronize(st));
  int64_t extra = 0;
  const std::vector<float> eager = su.Got(M, false, &extra);
  ExpectClose("fp8_gemv_graph", "eager_M3", eager, su.RefRows(M), kBoundF32);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  Fp8Gemv(p);
  DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) {
    su.o32.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<float> got = su.Got(M, false, &extra);
    const bool same = std::memcmp(got.data(), eager.data(), got.size() * sizeof(float)) == 0;
    std::printf("[metric] op=fp8_gemv_graph case=replay%d bitwise_equal_to_eager=%d%s\n", i, same ? 1 : 0,
                same ? " PASS" : " FAIL");
    EXPECT_TRUE(same) << "replay " << i;
    EXPECT_TRUE(su.CountersZero());
  }
  // New activations: the replay and an eager launch agree bit for bit and match the reference.
  const std::vector<float> a2 = RoundBf16Vec(RandomNormal(8 * su.lda));
  su.da.Upload(ToBf16(a2));
  su.o32.Poison();
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
  DS_CUDA_CHECK(cudaStreamSynchronize(st));
  const std::vector<float> replay = su.Got(M, false, &extra);
  ExpectClose("fp8_gemv_graph", "replay_new_activations_M3", replay, Reference(w, a2, su.lda, M), kBoundF32);
  su.o32.Poison();
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  Fp8Gemv(p);
  DS_CUDA_CHECK(cudaStreamSynchronize(st));
  const std::vector<float> eager2 = su.Got(M, false, &extra);
  EXPECT_EQ(std::memcmp(replay.data(), eager2.data(), replay.size() * sizeof(float)), 0);
  EXPECT_EQ(extra, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// A row's bits do not depend on M (the plan ignores M; MMA columns are independent): rows 0..2
// of an M = 3 launch equal rows 0..2 of the M = 4 launch (a decode batch of 3 and its graph
// bucket of 4), likewise 5 vs 8; and the plan is the same for every M.
TEST(CudaFp8Gemv, RowsDoNotDependOnM) {
  const Fp8W w = MakeW(7168, 2048);  // shared_down: split tiles at the auto CTA count
  GemvCase su(w, 0, 0);
  const Fp8GemvPlan p1 = Fp8GemvPlanFor(su.Params(1, false));
  for (int64_t M = 0; M <= 8; ++M) {
    const Fp8GemvPlan pm = Fp8GemvPlanFor(su.Params(M, false));
    EXPECT_EQ(pm.tma, p1.tma);
    EXPECT_EQ(pm.ctas, p1.ctas);
    EXPECT_EQ(pm.units, p1.units);
    EXPECT_EQ(pm.workspace_bytes, p1.workspace_bytes);
  }
  EXPECT_EQ(p1.workspace_bytes, Fp8GemvWorkspaceBytes(7168, 2048));
  const std::pair<int64_t, int64_t> pairs[] = {{3, 4}, {5, 8}, {1, 2}};
  for (const auto& [small, big] : pairs) {
    const std::vector<float> s = RunCase("shared_down_rows", su, small);
    const std::vector<float> b = RunCase("shared_down_rows", su, big);
    EXPECT_EQ(std::memcmp(s.data(), b.data(), s.size() * sizeof(float)), 0) << small << " vs " << big;
  }
}

// prefetch_weights with PDL (session 36): in a chain y = GEMV1(a) (bf16 out) -> GEMV2(y), both
// launched as programmatic dependents with the weights requested before the grid-dependency
// wait, GEMV2 must still read y only after GEMV1 completed: y is poisoned (NaN) by a memset in
// the stream before each chain, so an early read shows as NaN. Eager launches and a graph
// replay, each against the plain launches bit for bit; then GEMV2 eight times back to back (PDL
// edges between launches sharing one workspace: the split-K counters must be reset between).
// CTA counts: auto (3-4 units a CTA, all prefetched), 8 (112 units: the ring refills after the
// prefetched stages) and 149 (6 units for most CTAs: exactly the prefetched ring).
void PdlPrefetchChain(const Fp8W& w1, const Fp8W& w2, int ctas) {
  GemvCase s1(w1, 0, 0, ctas), s2(w2, 0, 0, ctas);
  const int64_t M = 4;
  const std::string tag = "_ctas" + std::to_string(ctas);
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const auto chain = [&](bool pdl, int reps) {
    for (int r = 0; r < reps; ++r) {
      DS_CUDA_CHECK(cudaMemsetAsync(s1.o16.get(), 0xFF, s1.o16.size() * sizeof(__nv_bfloat16), st));
      Fp8GemvParams p1 = s1.Params(M, true), p2 = s2.Params(M, false);
      p2.a = s1.o16.get(); p2.lda = s1.ldo;
      p1.stream = p2.stream = st;
      p1.pdl = p2.pdl = p1.prefetch_weights = p2.prefetch_weights = pdl;
      Fp8Gemv(p1);
      Fp8Gemv(p2);
    }
  };
  const auto result = [&]() {
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    int64_t extra = 0;
    std::vector<float> got = s2.Got(M, false, &extra);
    EXPECT_EQ(extra, 0);
    EXPECT_TRUE(s1.CountersZero() && s2.CountersZero()) << "split-K counters not reset";
    return got;
  };
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  chain(false, 1);
  const std::vector<float> plain = result();
  int64_t extra = 0;
  const std::vector<float> y = s1.Got(M, true, &extra);
  std::vector<float> y_rows(8 * w2.K, 0.f);  // GEMV2's activations [8, K2] as the reference reads them
  std::copy(y.begin(), y.end(), y_rows.begin());
  ExpectClose("fp8_gemv_pdl", "plain_chain_M4" + tag, plain, Reference(w2, y_rows, w2.K, M), kBoundF32);
  s2.o32.Poison();
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  chain(true, 4);
  const std::vector<float> eager = result();
  const bool eager_same = std::memcmp(eager.data(), plain.data(), plain.size() * sizeof(float)) == 0;
  std::printf("[metric] op=fp8_gemv_pdl case=eager_chain_x4%s bitwise_equal_to_plain=%d%s\n", tag.c_str(),
              eager_same ? 1 : 0, eager_same ? " PASS" : " FAIL");
  EXPECT_TRUE(eager_same);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  chain(true, 4);
  DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) {
    s2.o32.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    const std::vector<float> got = result();
    const bool same = std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)) == 0;
    std::printf("[metric] op=fp8_gemv_pdl case=graph_chain_x4%s_replay%d bitwise_equal_to_plain=%d%s\n", tag.c_str(), i,
                same ? 1 : 0, same ? " PASS" : " FAIL");
    EXPECT_TRUE(same) << "replay " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // GEMV2 back to back on its own output's input (y unchanged now): eight PDL launches.
  Fp8GemvParams p2 = s2.Params(M, false);
  p2.a = s1.o16.get(); p2.lda = s1.ldo; p2.stream = st; p2.pdl = p2.prefetch_weights = true;
  s2.o32.Poison();
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 8; ++i) Fp8Gemv(p2);
  const std::vector<float> repeated = result();
  EXPECT_EQ(std::memcmp(repeated.data(), plain.data(), plain.size() * sizeof(float)), 0) << "8 PDL launches" << tag;
  cudaStreamDestroy(st);
}

TEST(CudaFp8Gemv, PdlPrefetchChainMatchesPlain) {
  const Fp8W w1 = MakeW(2048, 7168), w2 = MakeW(7168, 2048);  // 896 units each: split tiles at every CTA count here
  for (int ctas : {0, 8, 149}) PdlPrefetchChain(w1, w2, ctas);
}

TEST(CudaFp8Gemv, RejectsBadInput) {
  Fp8GemvParams p;
  p.N = 256; p.K = 512; p.lda = 512; p.ldo = 256;
  for (int64_t M : {-1, 9, 16}) {
    p.M = M;
    EXPECT_THROW(Fp8GemvPlanFor(p), CheckError) << M;
    EXPECT_THROW(Fp8Gemv(p), CheckError) << M;
  }
  p.M = 2;
  p.N = 0;
  EXPECT_THROW(Fp8Gemv(p), CheckError);
  p.N = 256; p.K = 0;
  EXPECT_THROW(Fp8Gemv(p), CheckError);
  p.K = 512; p.lda = 256;
  EXPECT_THROW(Fp8Gemv(p), CheckError);
  p.lda = 512;
  EXPECT_THROW(Fp8Gemv(p), CheckError);  // null pointers
  EXPECT_THROW(Fp8GemvWorkspaceBytes(0, 512), CheckError);
  // The TMA path without (enough) workspace.
  const Fp8W w = MakeW(256, 512);
  GemvCase su(w, 0, 0);
  Fp8GemvParams q = su.Params(2, false);
  if (Fp8GemvPlanFor(q).tma) {
    q.workspace_bytes = Fp8GemvPlanFor(q).workspace_bytes - 16;
    EXPECT_THROW(Fp8Gemv(q), CheckError);
    q.workspace = nullptr;
    EXPECT_THROW(Fp8Gemv(q), CheckError);
  }
  q = su.Params(0, false);  // M = 0: nothing to do
  EXPECT_NO_THROW(Fp8Gemv(q));
}

}  // namespace
}  // namespace ds::cuda::test
