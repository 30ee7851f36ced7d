// MLA prefill (naive, decompressed K/V, causal, extending a cached prefix) vs
// ds::cpu::MlaPrefillAttention, several sequences in one launch, V3 head dims.
#include "backend/cpu/ops.h"
#include "backend/cuda/mla_prefill.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Seq { int64_t nq, nk; };

void RunCase(const std::vector<Seq>& seqs, int64_t H, int64_t nope, int64_t rope, int64_t dv, bool bf16_out, const char* name) {
  const int64_t dqk = nope + rope;
  int64_t Tq = 0, Tk = 0, max_q = 0;
  std::vector<int32_t> qs{0}, ks{0}, pos0;
  for (auto& s : seqs) {
    Tq += s.nq; Tk += s.nk; max_q = std::max(max_q, s.nq);
    qs.push_back(static_cast<int32_t>(Tq)); ks.push_back(static_cast<int32_t>(Tk));
    pos0.push_back(static_cast<int32_t>(s.nk - s.nq));
  }
  auto q = RandomNormal(Tq * H * dqk);
  auto k_nope = RandomNormal(Tk * H * nope);
  auto k_rope = RandomNormal(Tk * rope);  // shared across heads (MLA)
  auto v = RandomNormal(Tk * H * dv);
  const float scale = 1.0f / std::sqrt(float(dqk)) * 1.3f;
  std::vector<float> ref(Tq * H * dv);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t nk = seqs[s].nk;
    std::vector<float> k(nk * H * dqk);
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < nope; ++d) k[(j * H + h) * dqk + d] = k_nope[((ks[s] + j) * H + h) * nope + d];
        for (int64_t d = 0; d < rope; ++d) k[(j * H + h) * dqk + nope + d] = k_rope[(ks[s] + j) * rope + d];
      }
    cpu::MlaPrefillAttention({q.data() + qs[s] * H * dqk, k.data(), v.data() + ks[s] * H * dv, ref.data() + qs[s] * H * dv,
                              seqs[s].nq, nk, H, dqk, dv, pos0[s], scale});
  }
  Dev<float> dq(q), dkn(k_nope), dkr(k_rope), dv_(v);
  Dev<int32_t> dqs(qs), dks(ks), dpos(pos0);
  MlaPrefillParams p{};
  p.q = dq.get(); p.q_tok_stride = H * dqk; p.q_head_stride = dqk;
  p.k_nope = dkn.get(); p.kn_tok_stride = H * nope; p.kn_head_stride = nope;
  p.k_rope = dkr.get(); p.kr_tok_stride = rope; p.kr_head_stride = 0;
  p.v = dv_.get(); p.v_tok_stride = H * dv; p.v_head_stride = dv;
  p.o_tok_stride = H * dv; p.o_head_stride = dv;
  p.num_seqs = static_cast<int64_t>(seqs.size()); p.heads = H; p.d_nope = nope; p.d_rope = rope; p.dv = dv;
  p.q_start = dqs.get(); p.k_start = dks.get(); p.q_pos0 = dpos.get(); p.max_q_len = max_q; p.softmax_scale = scale;
  std::vector<float> got;
  if (bf16_out) {
    Dev<__nv_bfloat16> out(Tq * H * dv);
    p.out = out.get(); p.out_type = DTypeOut::kBF16;
    MlaPrefillAttention(p);
    got = FromBf16(out.Download());
  } else {
    Dev<float> out(Tq * H * dv);
    p.out = out.get(); p.out_type = DTypeOut::kF32;
    MlaPrefillAttention(p);
    got = out.Download();
  }
  ExpectClose("mla_prefill", std::string(name) + (bf16_out ? "_bf16" : "_f32"), got, ref, bf16_out ? 5e-3 : 1e-5);
}

TEST(CudaMlaPrefill, MatchesCpu) {
  // V3: 128 heads, qk 128 + 64, v 128. A fresh prompt, a chunk extending a 200-token prefix,
  // a 1-token chunk and a 1-token prompt, in one launch.
  RunCase({{96, 96}, {100, 300}, {1, 65}, {1, 1}}, 128, 128, 64, 128, false, "V3_mixed_chunks");
  RunCase({{256, 1000}}, 128, 128, 64, 128, true, "V3_chunk256_prefix744");
  RunCase({{5, 7}, {3, 3}}, 3, 8, 4, 12, false, "odd_dims");
}

// ---------------------------------------------------------------- tensor-core kernel
// MlaPrefillAttentionTc vs the CPU reference at V3 (128 heads) and V2-Lite (16 heads) shapes:
// several sequences per launch with lengths that are not multiples of the 64/128-query and
// 64-key tiles, fresh prompts (q_pos0 = 0), chunks extending a longer cached prefix (q_pos0 >
// 0) and 1-token chunks. q is given in fp32 (the kernel rounds it to bf16), k_nope / k_rope / v
// in bf16. Inputs are RandomNormal: |x| <= 2 sqrt(3) = 3.4641.
//
// Two references, two bounds:
// (1) CPU on the bf16-rounded q, k, v (what the kernel's MMAs read). The kernel then differs
//     only by rounding each probability p_j to bf16 before P V (relative error <= 2^-8, u),
//     fp32 accumulation order and exp2.approx (~1e-7 relative), and for bf16 output one more
//     rounding. Per output o = sum_j p_j v_j / sum_j p_j the P rounding moves o by at most
//     sum_j p_j |eps_j| |v_j| / sum_j p_j <= u max|v| = 3.4641 / 256 = 0.0135, the bf16 output
//     by <= u |o| <= 0.0135: max_abs <= 0.03 is a worst-case bound. rel_l2 (expected ~u/sqrt(3)
//     ~= 2e-3 for the P rounding, ~3e-3 with bf16 output) <= 6e-3.
// (2) CPU on the unrounded fp32 inputs (the end-to-end effect of bf16 operands). Adds the
//     rounding of q and k in each logit: s = scale q.k moves by scale * sum_d q_d k_d (dq_d +
//     dk_d), std ~= scale sqrt(192) (u/sqrt(3)) sqrt(2) = 1.3 * 0.0032 = 4.2e-3 (scale below is
//     1.3 / sqrt(192)), which moves o by ~ that fraction of |o| (o's deviation is a p-weighted
//     sum of independent logit errors times (v_j - o)); and the rounding of v (~2.3e-3
//     relative). In quadrature with (1): ~6e-3 expected; bound rel_l2 <= 1.5e-2. A layout,
//     masking or softmax bug gives rel_l2 ~ 1 (or, for an off-by-one mask, max_abs ~ 0.5 on
//     the first rows of a fresh prompt, caught by (1)'s max_abs).
void RunTcCase(const std::vector<Seq>& seqs, int64_t H, bool bf16_out, int block_q, const char* name) {
  const int64_t nope = 128, rope = 64, dv = 128, dqk = nope + rope;
  int64_t Tq = 0, Tk = 0, max_q = 0;
  std::vector<int32_t> qs{0}, ks{0}, pos0;
  for (auto& s : seqs) {
    Tq += s.nq; Tk += s.nk; max_q = std::max(max_q, s.nq);
    qs.push_back(static_cast<int32_t>(Tq)); ks.push_back(static_cast<int32_t>(Tk));
    pos0.push_back(static_cast<int32_t>(s.nk - s.nq));
  }
  // Device layout as the runner's: k_nope and v interleaved per head in one [Tk, H, 256] bf16
  // buffer (kv_b_proj output), k_rope [Tk, 64] shared by the heads, q [Tq, H, 192] fp32.
  const auto q = RandomNormal(Tq * H * dqk);
  const auto kv = RandomNormal(Tk * H * (nope + dv));
  const auto k_rope = RandomNormal(Tk * rope);
  const float scale = 1.0f / std::sqrt(float(dqk)) * 1.3f;
  const auto reference = [&](bool rounded) {
    const auto R = [&](float x) { return rounded ? RoundBf16(x) : x; };
    std::vector<float> ref(Tq * H * dv), qr(q.size());
    for (size_t i = 0; i < q.size(); ++i) qr[i] = R(q[i]);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t nk = seqs[s].nk;
      std::vector<float> k(nk * H * dqk), v(nk * H * dv);
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t h = 0; h < H; ++h) {
          const float* src = kv.data() + ((ks[s] + j) * H + h) * (nope + dv);
          for (int64_t d = 0; d < nope; ++d) k[(j * H + h) * dqk + d] = R(src[d]);
          for (int64_t d = 0; d < rope; ++d) k[(j * H + h) * dqk + nope + d] = R(k_rope[(ks[s] + j) * rope + d]);
          for (int64_t d = 0; d < dv; ++d) v[(j * H + h) * dv + d] = R(src[nope + d]);
        }
      cpu::MlaPrefillAttention({qr.data() + qs[s] * H * dqk, k.data(), v.data(), ref.data() + qs[s] * H * dv,
                                seqs[s].nq, nk, H, dqk, dv, pos0[s], scale});
    }
    return ref;
  };
  Dev<float> dq(q);
  Dev<__nv_bfloat16> dkv(ToBf16(kv)), dkr(ToBf16(k_rope));
  Dev<int32_t> dqs(qs), dks(ks), dpos(pos0);
  MlaPrefillTcParams p{};
  p.q = dq.get(); p.q_tok_stride = H * dqk; p.q_head_stride = dqk;
  p.k_nope = dkv.get(); p.kn_tok_stride = H * (nope + dv); p.kn_head_stride = nope + dv;
  p.k_rope = dkr.get(); p.kr_tok_stride = rope; p.kr_head_stride = 0;
  p.v = dkv.get() + nope; p.v_tok_stride = H * (nope + dv); p.v_head_stride = nope + dv;
  p.o_tok_stride = H * dv; p.o_head_stride = dv;
  p.num_seqs = static_cast<int64_t>(seqs.size()); p.heads = H; p.d_nope = nope; p.d_rope = rope; p.dv = dv;
  p.q_start = dqs.get(); p.k_start = dks.get(); p.q_pos0 = dpos.get(); p.max_q_len = max_q; p.softmax_scale = scale;
  p.block_q = block_q;
  std::vector<float> got;
  if (bf16_out) {
    Dev<__nv_bfloat16> out(Tq * H * dv);
    p.out = out.get(); p.out_type = DTypeOut::kBF16;
    MlaPrefillAttentionTc(p);
    got = FromBf16(out.Download());
  } else {
    Dev<float> out(Tq * H * dv);
    p.out = out.get(); p.out_type = DTypeOut::kF32;
    MlaPrefillAttentionTc(p);
    got = out.Download();
  }
  const std::string cas = std::string(name) + "_bq" + std::to_string(block_q) + (bf16_out ? "_bf16" : "_f32");
  ExpectClose("mla_prefill_tc_vs_bf16_inputs", cas, got, reference(true), 6e-3, 0.03);
  ExpectClose("mla_prefill_tc_vs_fp32", cas, got, reference(false), 1.5e-2);
}

TEST(CudaMlaPrefillTc, MatchesCpuV3) {
  // 128 heads: fresh prompts of 200 / 130 / 64 tokens, a 77-token chunk after a 256-token
  // prefix, a 1-token chunk after 64 cached tokens.
  RunTcCase({{200, 200}, {77, 333}, {1, 65}, {130, 130}, {64, 64}}, 128, false, 64, "V3_mixed");
  RunTcCase({{200, 200}, {77, 333}, {1, 65}, {130, 130}, {64, 64}}, 128, false, 128, "V3_mixed");
  // A 100-token chunk after a 1000-token prefix (most key tiles unmasked), bf16 output.
  RunTcCase({{100, 1100}}, 128, true, 64, "V3_chunk100_prefix1000");
}

TEST(CudaMlaPrefillTc, MatchesCpuV2Lite) {
  // 16 heads: a 1000-token prompt, a 300-token chunk after 600 cached, a 3-token prompt, a
  // 129-token chunk after 371 cached.
  for (int bq : {64, 128})
    RunTcCase({{1000, 1000}, {300, 900}, {3, 3}, {129, 500}}, 16, bq == 128, bq, "V2Lite_mixed");
}

TEST(CudaMlaPrefillTc, RejectsOtherDims) {
  EXPECT_TRUE(MlaPrefillTcSupported(128, 64, 128));
  EXPECT_FALSE(MlaPrefillTcSupported(8, 4, 12));
  MlaPrefillTcParams p{};
  p.d_nope = 8; p.d_rope = 4; p.dv = 12;
  EXPECT_THROW(MlaPrefillAttentionTc(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
