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

}  // namespace
}  // namespace ds::cuda::test
