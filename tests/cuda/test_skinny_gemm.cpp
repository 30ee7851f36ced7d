// Decode-size grouped GEMM (skinny_gemm.h) vs a CPU double-precision reference on the same
// bf16 activations and (dequantised) weights: bf16 and FP8 block-scaled weights, groups with
// 0/1/3/17 rows, odd N and K (partial 128x128 scale blocks, unaligned rows), strided a/out,
// fp32 and bf16 outputs, padded segments, the one-group dense form, and a CUDA-graph replay
// with new device offsets (no host reads inside the op).
#include <numeric>

#include "backend/cuda/skinny_gemm.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Weights {
  bool fp8 = false;
  int64_t E = 0, N = 0, K = 0;
  std::vector<float> deq;  // [E, N, K] as the GPU must see them
  std::vector<uint8_t> q;  // fp8 bytes
  std::vector<float> scales;  // [E, ceil(N/128), ceil(K/128)]
  std::vector<__nv_bfloat16> bf;
};

Weights MakeWeights(bool fp8, int64_t E, int64_t N, int64_t K) {
  Weights w;
  w.fp8 = fp8; w.E = E; w.N = N; w.K = K;
  const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
  w.deq.resize(E * N * K);
  if (fp8) {
    w.q.resize(E * N * K);
    auto r = RandomNormal(w.q.size(), 100.f);
    ParallelFor(static_cast<int64_t>(w.q.size()), [&](int64_t i) { w.q[i] = F32ToFp8E4M3(r[i]); });
    // Every 61st weight is an e4m3 subnormal or zero (either sign): the widening must be exact.
    for (size_t i = 0; i < w.q.size(); i += 61) w.q[i] = static_cast<uint8_t>((i & 7) | ((i >> 3) & 1 ? 0x80 : 0));
    w.scales = RandomF(E * nb * kb, 0.5f, 2.0f);
    for (auto& s : w.scales) s *= std::ldexp(1.f, -9);
    ParallelFor(E * N, [&](int64_t en) {
      const int64_t e = en / N, n = en % N;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = en * K + k;
        w.deq[i] = Fp8E4M3ToF32(w.q[i]) * w.scales[(e * nb + n / 128) * kb + k / 128];
      }
    });
  } else {
    w.deq = RoundBf16Vec(RandomNormal(E * N * K, 0.05f));
    w.bf = ToBf16(w.deq);
  }
  return w;
}

// out[r, n] = a[r, :] . w[e(r), n, :] in double, for the rows of every group.
std::vector<float> Reference(const Weights& w, const std::vector<float>& a, int64_t lda, const std::vector<int32_t>& off) {
  const int64_t rows = off.back();
  std::vector<float> ref(rows * w.N, 0.f);
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(off.size()); ++e)
    for (int64_t r = off[e]; r < off[e + 1]; ++r)
      ParallelFor(w.N, [&](int64_t n) {
        const float* wr = w.deq.data() + (e * w.N + n) * w.K;
        const float* ar = a.data() + r * lda;
        double s = 0;
        for (int64_t k = 0; k < w.K; ++k) s += double(ar[k]) * wr[k];
        ref[r * w.N + n] = static_cast<float>(s);
      });
  return ref;
}

std::vector<int32_t> Offsets(const std::vector<int>& rows, int pad_to) {
  std::vector<int32_t> off{0};
  for (int r : rows) off.push_back(off.back() + (r + pad_to - 1) / pad_to * pad_to);
  return off;
}

struct DevWeights {
  explicit DevWeights(const Weights& w)
      : bf(w.fp8 ? std::vector<__nv_bfloat16>(1) : w.bf), q(w.fp8 ? w.q : std::vector<uint8_t>(1)),
        s(w.fp8 ? w.scales : std::vector<float>(1)) {}
  Dev<__nv_bfloat16> bf;
  Dev<uint8_t> q;
  Dev<float> s;
};

// Runs one case: groups with `rows` (padded to `pad_to` with zero rows), a with row stride
// lda = K + 8, out with ldo = N + 3 (the extra columns must stay untouched).
void RunCase(const char* name, bool fp8, int64_t N, int64_t K, const std::vector<int>& rows, DTypeOut out_type,
             int pad_to = 1, int64_t max_active = 0, int64_t max_group_rows = 16, bool dense = false) {
  const int64_t E = static_cast<int64_t>(rows.size());
  const Weights w = MakeWeights(fp8, E, N, K);
  const auto off = Offsets(rows, pad_to);
  const int64_t R = off.back(), lda = K + 8, ldo = N + 3;
  std::vector<float> a(std::max<int64_t>(R, 1) * lda, 0.f);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = off[e]; r < off[e] + rows[e]; ++r) {
      auto v = RoundBf16Vec(RandomNormal(K));
      std::copy(v.begin(), v.end(), a.begin() + r * lda);
    }
  const auto ref = Reference(w, a, lda, off);
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<int32_t> doff(off);
  DevWeights dw(w);
  Dev<float> o32(std::max<int64_t>(R, 1) * ldo);
  Dev<__nv_bfloat16> o16(std::max<int64_t>(R, 1) * ldo);
  SkinnyGemmParams sp{};
  GroupedGemmParams& g = sp.g;
  g.a = da.get(); g.lda = lda; g.offsets = dense ? nullptr : doff.get(); g.max_rows = R;
  g.w = fp8 ? static_cast<const void*>(dw.q.get()) : dw.bf.get(); g.w_fp8 = fp8; g.w_scales = fp8 ? dw.s.get() : nullptr;
  g.num_experts = E; g.N = N; g.K = K; g.ldo = ldo; g.out_type = out_type;
  g.out = out_type == DTypeOut::kF32 ? static_cast<void*>(o32.get()) : o16.get();
  sp.max_group_rows = max_group_rows; sp.max_active_groups = max_active;
  for (int v = 0; v < kSkinnyVariants; ++v) {
    sp.variant = v;
    o32.Poison();
    o16.Poison();
    SkinnyGemm(sp);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> full = out_type == DTypeOut::kF32 ? o32.Download() : FromBf16(o16.Download());
    std::vector<float> got(R * N);
    int64_t extra_written = 0;
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t n = 0; n < N; ++n) got[r * N + n] = full[r * ldo + n];
      for (int64_t n = N; n < ldo; ++n) extra_written += !std::isnan(full[r * ldo + n]);
    }
    EXPECT_EQ(extra_written, 0) << name << ": columns past N were written";
    const std::string cas = std::string(name) + (out_type == DTypeOut::kF32 ? "_f32" : "_bf16") + "_v" + std::to_string(v);
    // fp32 out: exact products, fp32 sums (FP8: per 64-k chunk, then times the block scale).
    ExpectClose(fp8 ? "skinny_gemm_fp8" : "skinny_gemm_bf16", cas, got, ref, out_type == DTypeOut::kF32 ? 2e-5 : 5e-3);
  }
}

TEST(CudaSkinnyGemm, GroupsOfSeveralSizesBf16) {
  for (DTypeOut ot : {DTypeOut::kF32, DTypeOut::kBF16}) {
    RunCase("rows_0_1_3_17_0_N200_K264", false, 200, 264, {0, 1, 3, 17, 0}, ot);
    RunCase("rows_2_0_5_N136_K100_scalarK", false, 136, 100, {2, 0, 5}, ot);
    RunCase("rows_1_4_N2816_K2048_v2lite_gate_up", false, 2816, 2048, {1, 4}, ot, 1, 0, 8);
  }
}

TEST(CudaSkinnyGemm, GroupsOfSeveralSizesFp8) {
  for (DTypeOut ot : {DTypeOut::kF32, DTypeOut::kBF16}) {
    RunCase("rows_0_1_3_17_0_N200_K200", true, 200, 200, {0, 1, 3, 17, 0}, ot);
    RunCase("rows_3_1_N96_K136_scalarK", true, 96, 136, {3, 1}, ot);
    RunCase("rows_0_2_N4096_K7168_v3_gate_up", true, 4096, 7168, {0, 2}, ot, 1, 0, 8);
    RunCase("rows_5_N7168_K2048_v3_down", true, 7168, 2048, {5}, ot, 1, 0, 8);
  }
}

TEST(CudaSkinnyGemm, EmptyGroupsAndActiveSlotBound) {
  // 40 groups, 3 non-empty; the grid has only as many slots as non-empty groups (block j finds
  // the j-th non-empty group on the device), one more slot than needed, and all 40.
  std::vector<int> rows(40, 0);
  rows[0] = 1; rows[17] = 3; rows[39] = 17;
  for (int64_t slots : {3, 4, 0}) {
    const std::string name = "E40_active3_slots" + std::to_string(slots);
    RunCase(name.c_str(), true, 130, 256, rows, DTypeOut::kF32, 1, slots, 17);
    RunCase(name.c_str(), false, 130, 256, rows, DTypeOut::kF32, 1, slots, 8);
  }
}

TEST(CudaSkinnyGemm, PaddedSegmentsAndDenseOneGroup) {
  // Segments padded to 64 rows (moe_permute's layout for the big-tile kernel): zero rows give 0.
  RunCase("padded64_rows_1_0_3", true, 192, 384, {1, 0, 3}, DTypeOut::kBF16, 64, 0, 64);
  for (int m : {1, 5, 16, 33}) {
    const std::string n = "dense_M" + std::to_string(m);
    RunCase((n + "_fp8_N576_K7168").c_str(), true, 576, 7168, {m}, DTypeOut::kF32, 1, 0, m, true);
    RunCase((n + "_bf16_N1000_K1408").c_str(), false, 1000, 1408, {m}, DTypeOut::kF32, 1, 0, m, true);
  }
}

// Captured once in a CUDA graph, replayed after the device offsets change: the op must read
// the group sizes on the device at replay time.
TEST(CudaSkinnyGemm, GraphReplayWithNewOffsets) {
  const int64_t E = 6, N = 256, K = 512, R = 12, lda = K, ldo = N;
  const Weights w = MakeWeights(true, E, N, K);
  auto a = RoundBf16Vec(RandomNormal(R * lda));
  Dev<__nv_bfloat16> da(ToBf16(a));
  Dev<int32_t> doff(E + 1);
  DevWeights dw(w);
  Dev<float> out(R * ldo);
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  SkinnyGemmParams sp{};
  GroupedGemmParams& g = sp.g;
  g.a = da.get(); g.lda = lda; g.offsets = doff.get(); g.max_rows = R; g.w = dw.q.get(); g.w_fp8 = true;
  g.w_scales = dw.s.get(); g.num_experts = E; g.N = N; g.K = K; g.out = out.get(); g.out_type = DTypeOut::kF32;
  g.ldo = ldo; g.stream = st;
  sp.max_group_rows = 12; sp.max_active_groups = 4;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  SkinnyGemm(sp);
  DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<std::vector<int>> layouts = {{0, 4, 0, 0, 8, 0}, {1, 1, 0, 10, 0, 0}, {0, 0, 0, 0, 0, 12}};
  int i = 0;
  for (const auto& rows : layouts) {
    const auto off = Offsets(rows, 1);
    doff.Upload(off);
    out.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream copies before the replay
    DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    ExpectClose("skinny_gemm_fp8_graph", "layout" + std::to_string(i++), out.Download(), Reference(w, a, lda, off), 2e-5);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace ds::cuda::test
