// MoE combine + residual add + RMSNorm in one kernel (moe_combine_norm.h) vs the unfused
// sequence on the GPU (MoeCombine, then RmsNorm with the residual) bit for bit, and vs a CPU
// reference (ds::cpu::RmsNorm on a host combine) within fp32 rounding, at V2-Lite (2048) and V3
// (7168) widths and odd ones, T = 1..16, with and without a base (unfused shared-expert output),
// with fused shared-expert groups (fp32 y, routed rows rounded to bf16), skipped pairs (pos -1),
// and every staged form of the kernel (1, 2, 4 or 8 elements per thread; slot batches) and its
// loop form (> 16 slots).
// The split form (MoeCombineNormParams::split_blocks: a token's row over G blocks, one
// cooperative launch with a grid barrier) against the same unfused sequence, bit for bit, at G =
// 2..32 (blocks of <= 256 threads), after a first launch on the same barrier words (the counter's epoch across launches).
// Also RmsNorm's bf16 copy (out_bf16) vs the round-to-nearest-even bf16 of its fp32 output (what
// the runner's F32ToBf16 launch wrote), and its fp32 output unchanged by the copy, bit for bit.
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/moe_permute.h"
#include "backend/cuda/rmsnorm.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// S > 0: fused shared groups in fp32 y (rows m + s n + t), routed rows rounded to bf16 in the
// kernel; the unfused reference gets base = sum_s y_s (host fp32, same order) and bf16 y.
void RunCase(int64_t n, int64_t d, int64_t K, bool base, int S, bool skip, bool norm, const char* tag, int split = 0) {
  const std::string cas = std::string(tag) + "_T" + std::to_string(n) + "_d" + std::to_string(d) + "_K" +
                          std::to_string(K) + (base ? "_base" : "") + "_S" + std::to_string(S) + (skip ? "_skip" : "") +
                          (norm ? "" : "_nonorm") + (split > 1 ? "_split" + std::to_string(split) : "");
  const int64_t m = n * K, rows = m + S * n;
  auto y32 = RandomNormal(rows * d, 0.5f);
  const auto y16 = ToBf16(y32);               // routed rows as the unfused path stores them
  const auto y16f = FromBf16(y16);
  std::vector<int32_t> pos(m);  // a random permutation of the routed rows
  for (int64_t i = 0; i < m; ++i) pos[i] = static_cast<int32_t>(i);
  std::shuffle(pos.begin(), pos.end(), Rng());
  if (skip) for (int64_t i = 0; i < m; i += 5) pos[i] = -1;
  auto wts = RandomF(m, 0.f, 1.f);
  auto bs = RandomNormal(n * d, 0.3f);
  auto res = RandomNormal(n * d);
  auto nw = RandomF(d, 0.5f, 1.5f);
  const float eps = 1e-6f;
  // Host combine in the kernel's order (the CPU reference).
  std::vector<float> comb(n * d), shared_sum(n * d, 0.f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) {
      float acc = base ? bs[t * d + i] : 0.f;
      float sh = 0.f;
      for (int s = 0; s < S; ++s) { acc += y32[(m + s * n + t) * d + i]; sh += y32[(m + s * n + t) * d + i]; }
      shared_sum[t * d + i] = sh;
      for (int64_t j = 0; j < K; ++j)
        if (pos[t * K + j] >= 0) acc += wts[t * K + j] * y16f[int64_t{pos[t * K + j]} * d + i];
      comb[t * d + i] = acc;
    }
  std::vector<float> res_cpu = res, out_cpu(n * d);
  cpu::RmsNorm({comb.data(), d, res_cpu.data(), d, nw.data(), out_cpu.data(), d, n, d, eps});
  // Unfused GPU sequence.
  Dev<__nv_bfloat16> dy16(y16);
  Dev<float> dy32(y32), dwts(wts), dnw(nw);
  Dev<int32_t> dpos(pos);
  Dev<float> ubase(S > 0 ? shared_sum : bs), ures(res), uout(n * d);
  MoeCombine({dy16.get(), true, d, dpos.get(), dwts.get(), n, K, d, ubase.get(), d, base || S > 0, nullptr});
  if (norm) RmsNorm({ubase.get(), d, ures.get(), d, dnw.get(), uout.get(), d, DTypeOut::kF32, n, d, eps, nullptr});
  // Fused.
  Dev<float> fbase(bs), fres(res), fout(n * d), fmoe(n * d);
  Dev<__nv_bfloat16> fout16(n * d);
  MoeCombineNormParams p{};
  p.y = S > 0 ? static_cast<const void*>(dy32.get()) : dy16.get(); p.y_bf16 = S == 0; p.ldy = d;
  p.round_y_bf16 = S > 0; p.pos = dpos.get(); p.weights = dwts.get(); p.n = n; p.top_k = K; p.d = d;
  if (base) { p.base = fbase.get(); p.ld_base = d; }
  p.num_shared = S; p.shared_row0 = m;
  if (norm) {
    p.residual = fres.get(); p.ldres = d; p.norm_weight = dnw.get(); p.eps = eps; p.out = fout.get(); p.ldout = d;
    p.out_bf16 = fout16.get(); p.ldout_bf16 = d;
  } else {
    p.moe_out = fmoe.get(); p.ld_moe_out = d;
  }
  Dev<uint32_t> dsync(2);
  Dev<float> dss(n * 32);
  if (split > 1) {
    DS_CUDA_CHECK(cudaMemset(dsync.get(), 0, 2 * sizeof(uint32_t)));
    p.split_blocks = split; p.split_sync = dsync.get(); p.split_ss = dss.get();
    // A first launch on scratch copies of the in / out rows, on the same barrier words.
    Dev<float> sres(res), sout(n * d), smoe(n * d);
    Dev<__nv_bfloat16> sout16(n * d);
    MoeCombineNormParams q = p;
    q.residual = sres.get(); q.out = sout.get(); q.out_bf16 = sout16.get();
    if (q.moe_out) q.moe_out = smoe.get();
    MoeCombineNorm(q);
    dss.Poison();  // the checked launch must write its own warp sums before any block reads them
  }
  MoeCombineNorm(p);
  if (split > 1) {
    const std::vector<uint32_t> sync = dsync.Download();
    EXPECT_EQ((uint64_t{sync[1]} << 32) | sync[0], uint64_t{2} << 20) << cas << ": the barrier counter after two launches";
  }
  if (!norm) {
    const int64_t bits = BitMismatches(fmoe.Download(), ubase.Download());
    std::printf("[metric] op=moe_combine_norm case=%s moe_out_vs_unfused_bits=%lld%s\n", cas.c_str(), (long long)bits,
                bits == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(bits, 0) << cas;
    ExpectClose("moe_combine_vs_cpu", cas, fmoe.Download(), comb, 1e-6);
    return;
  }
  const auto out = fout.Download(), r = fres.Download();
  const int64_t out_bits = BitMismatches(out, uout.Download()), res_bits = BitMismatches(r, ures.Download());
  const auto o16 = FromBf16(fout16.Download());
  int64_t o16_bad = 0;
  for (int64_t i = 0; i < n * d; ++i) o16_bad += o16[i] != RoundBf16(out[i]) || !std::isfinite(o16[i]);
  std::printf("[metric] op=moe_combine_norm case=%s out_vs_unfused_bits=%lld residual_vs_unfused_bits=%lld "
              "bf16_copy_bad=%lld%s\n",
              cas.c_str(), (long long)out_bits, (long long)res_bits, (long long)o16_bad,
              out_bits == 0 && res_bits == 0 && o16_bad == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(out_bits, 0) << cas;
  EXPECT_EQ(res_bits, 0) << cas;
  EXPECT_EQ(o16_bad, 0) << cas;
  ExpectClose("moe_combine_norm_vs_cpu", cas, out, out_cpu, 1e-6);
  ExpectClose("moe_combine_norm_residual_vs_cpu", cas, r, res_cpu, 1e-6);
}

TEST(CudaMoeCombineNorm, MatchesUnfusedBitwise) {
  for (int64_t n = 1; n <= 16; ++n) {
    RunCase(n, 2048, 6, true, 0, false, true, "V2Lite");
    RunCase(n, 7168, 8, true, 0, false, true, "V3");
  }
  RunCase(3, 2048, 6, false, 0, false, true, "V2Lite_nobase");
  RunCase(5, 1024, 4, true, 0, true, true, "d1024_skip");
  RunCase(4, 1000, 4, true, 0, false, true, "d1000");
  RunCase(2, 33, 3, true, 0, true, true, "odd");
  // The staged forms' slot batches (16 / elements per thread slots at a time) and the loop form
  // past 16 slots: 12 slots of 2 elements (two batches), 4 per thread, 8 with slots skipped,
  // 20 slots (loop form).
  RunCase(2, 2048, 12, true, 0, true, true, "d2048_K12_skip");
  RunCase(3, 4096, 8, true, 0, false, true, "d4096");
  RunCase(2, 7168, 9, true, 0, true, true, "V3_K9_skip");
  RunCase(2, 2048, 20, true, 0, true, true, "d2048_K20");
}

TEST(CudaMoeCombineNorm, FusedSharedGroups) {
  for (int64_t n : {1, 2, 7, 16}) {
    RunCase(n, 2048, 6, false, 2, false, true, "V2Lite_shared2");
    RunCase(n, 7168, 8, false, 1, false, true, "V3_shared1");
    RunCase(n, 2048, 6, false, 2, false, false, "V2Lite_shared2");
  }
  RunCase(3, 33, 3, false, 2, true, true, "odd_shared2");
}

TEST(CudaMoeCombineNorm, SplitBlocksMatchUnfusedBitwise) {
  for (int g : {4, 8, 16, 32}) {
    RunCase(1, 7168, 8, true, 0, false, true, "V3", g);
    RunCase(1, 2048, 6, true, 0, false, true, "V2Lite", g);
  }
  for (int64_t n : {2, 7, 16}) RunCase(n, 7168, 8, true, 0, false, true, "V3", 8);
  RunCase(2, 7168, 9, true, 0, true, true, "V3_K9_skip", 8);
  RunCase(3, 2048, 12, true, 0, true, true, "d2048_K12_skip", 4);
  RunCase(2, 7168, 16, false, 0, false, true, "V3_K16_nobase", 8);
  RunCase(4, 1000, 4, true, 0, false, true, "d1000", 8);  // 256 virtual threads: 8 blocks of 32
  RunCase(2, 33, 3, true, 0, true, true, "odd", 2);
  for (int64_t n : {1, 16}) RunCase(n, 7168, 8, false, 1, false, true, "V3_shared1", 8);
  RunCase(2, 2048, 6, false, 2, false, true, "V2Lite_shared2", 4);
}

TEST(CudaMoeCombineNorm, CombineOnly) {
  for (int64_t n : {1, 16}) RunCase(n, 7168, 8, true, 0, true, false, "V3");
}

TEST(CudaMoeCombineNorm, RejectsBadParams) {
  MoeCombineNormParams p{};
  p.n = 1; p.d = 8; p.top_k = 1; p.y_bf16 = true; p.num_shared = 1;
  EXPECT_THROW(MoeCombineNorm(p), CheckError);  // shared groups need fp32 y
  p.num_shared = 0;
  EXPECT_THROW(MoeCombineNorm(p), CheckError);  // no output
  // split_blocks: the residual form only, <= 16 slots, G dividing the warps, its scratch given.
  // (Valid pointers throughout, so that a check that stopped throwing would launch on real memory.)
  Dev<float> res(8), w(8), out(8), ss(32), wts(17);
  Dev<__nv_bfloat16> y(8);
  Dev<int32_t> pos(std::vector<int32_t>(17, -1));
  Dev<uint32_t> sync(2);
  MoeCombineNormParams q{};
  q.n = 1; q.d = 8; q.top_k = 1; q.y_bf16 = true; q.split_blocks = 2;
  q.y = y.get(); q.ldy = 8; q.pos = pos.get(); q.weights = wts.get();
  q.residual = res.get(); q.norm_weight = w.get(); q.out = out.get();
  EXPECT_THROW(MoeCombineNorm(q), CheckError);  // no split_sync / split_ss
  q.split_sync = sync.get(); q.split_ss = ss.get();
  q.split_blocks = 3;
  EXPECT_THROW(MoeCombineNorm(q), CheckError);  // 3 does not divide 8 warps
  q.d = 2048; q.split_blocks = 2;
  EXPECT_THROW(MoeCombineNorm(q), CheckError);  // blocks of 512 threads
  q.d = 8;
  q.split_blocks = 2; q.top_k = 17;
  EXPECT_THROW(MoeCombineNorm(q), CheckError);  // > 16 slots
  q.top_k = 1; q.residual = nullptr; q.moe_out = out.get();
  EXPECT_THROW(MoeCombineNorm(q), CheckError);  // not the residual form
}

// RmsNorm's out_bf16: the bf16 copy equals bf16(fp32 output) (round to nearest even, as the
// F32ToBf16 launch it replaces), and the fp32 output is the one without the copy.
TEST(CudaRmsNormBf16Copy, MatchesF32ToBf16) {
  for (int64_t d : {2048, 7168, 33})
    for (int64_t n : {1, 16}) {
      auto x = RandomNormal(n * d), res = RandomNormal(n * d), w = RandomF(d, 0.5f, 1.5f);
      Dev<float> dx(x), dres(res), dw(w), dout(n * d), dres2(res), dout2(n * d);
      Dev<__nv_bfloat16> d16(n * d);
      RmsNormParams p{dx.get(), d, dres.get(), d, dw.get(), dout.get(), d, DTypeOut::kF32, n, d, 1e-6f, nullptr};
      p.out_bf16 = d16.get(); p.ld_out_bf16 = d;
      RmsNorm(p);
      RmsNorm({dx.get(), d, dres2.get(), d, dw.get(), dout2.get(), d, DTypeOut::kF32, n, d, 1e-6f, nullptr});
      const auto o16 = FromBf16(d16.Download()), o32 = dout.Download();
      int64_t bits16 = 0;
      for (int64_t i = 0; i < n * d; ++i) bits16 += o16[i] != RoundBf16(o32[i]) || !std::isfinite(o16[i]);
      const int64_t bits32 = BitMismatches(o32, dout2.Download());
      std::printf("[metric] op=rmsnorm_bf16_copy case=T%lld_d%lld bf16_bad=%lld f32_bits=%lld%s\n", (long long)n,
                  (long long)d, (long long)bits16, (long long)bits32, bits16 == 0 && bits32 == 0 ? " PASS" : " FAIL");
      EXPECT_EQ(bits16, 0);
      EXPECT_EQ(bits32, 0);
    }
}

}  // namespace
}  // namespace ds::cuda::test
