// MLA decode (absorbed, paged bf16 latent cache, split-KV + combine) vs
// ds::cpu::MlaDecodeAttention: V3 dims (576-dim keys, 512-dim values, 128 heads), a mix of
// context lengths (1 .. 5000, around block edges) in one batch, and 2-token queries (MTP).
#include "backend/cpu/ops.h"
#include "backend/cuda/mla_decode.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H, int64_t kvl, int64_t rope,
         int64_t chunk, const char* name) {
  const int64_t S = static_cast<int64_t>(ctx.size()), L = kvl + rope, bs = 64;
  int64_t max_blocks = 0, total_blocks = 0, max_ctx = 0;
  for (auto c : ctx) { max_blocks = std::max<int64_t>(max_blocks, (c + bs - 1) / bs); total_blocks += (c + bs - 1) / bs; max_ctx = std::max<int64_t>(max_ctx, c); }
  const int64_t num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), Rng());
  std::vector<int32_t> table(S * max_blocks, -1), qs{0};
  int64_t used = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t b = 0; b < (ctx[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = perm[used++];
    qs.push_back(qs.back() + qlen[s]);
  }
  const int64_t T = qs.back();
  auto cache = RoundBf16Vec(RandomNormal(num_blocks * bs * L));
  auto q = RandomNormal(T * H * L, 0.3f);
  const float scale = 0.1352f;
  std::vector<float> ref(T * H * kvl);
  cpu::MlaDecodeAttention({q.data(), cache.data(), ref.data(), S, H, kvl, rope, bs, qs.data(), ctx.data(), table.data(),
                           max_blocks, scale});
  Dev<float> dq(q);
  Dev<__nv_bfloat16> dc(ToBf16(cache));
  Dev<int32_t> dqs(qs), dctx(ctx), dtab(table);
  Dev<float> ws(MlaDecodeWorkspaceFloats(T, H, kvl, max_ctx, chunk));
  Dev<float> out(T * H * kvl);
  MlaDecodeParams p{};
  p.q = dq.get(); p.q_tok_stride = H * L; p.q_head_stride = L;
  p.cache = dc.get(); p.num_tokens = T; p.num_seqs = S; p.heads = H; p.kv_lora = kvl; p.rope_dim = rope; p.block_size = bs;
  p.query_start = dqs.get(); p.context_lens = dctx.get(); p.block_table = dtab.get(); p.max_blocks = max_blocks;
  p.max_context = max_ctx; p.kv_chunk = chunk; p.softmax_scale = scale; p.workspace = ws.get();
  p.out = out.get(); p.o_tok_stride = H * kvl; p.o_head_stride = kvl; p.out_type = DTypeOut::kF32;
  MlaDecodeAttention(p);
  ExpectClose("mla_decode", name, out.Download(), ref, 2e-5);
}

TEST(CudaMlaDecode, MatchesCpu) {
  RunCase({1, 63, 64, 65, 1000, 5000}, {1, 1, 1, 1, 1, 1}, 128, 512, 64, 256, "V3_mixed_ctx_decode");
  RunCase({2, 130, 4097}, {2, 2, 2}, 128, 512, 64, 256, "V3_mtp_qlen2");
  RunCase({300, 17}, {3, 1}, 16, 512, 64, 64, "TP8_heads16_chunk64");
  RunCase({5, 40}, {1, 2}, 3, 32, 16, 32, "odd_dims");
}

}  // namespace
}  // namespace ds::cuda::test
