// Timings (CUDA events, median of 20 after 3 warm-ups) of the kernels that dominate a decode
// step, printed as "[perf]" lines next to ../shared/docs/ANCHORS.md's figures. No assertion on
// speed: these record where the backend stands.
#include <algorithm>

#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/moe_permute.h"
#include "backend/cuda/stream.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

template <typename F>
float MedianMs(F&& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  EventTimer timer(nullptr);
  for (int i = 0; i < 20; ++i) {
    timer.Start();
    f();
    t.push_back(timer.StopMs());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST(CudaPerf, MlaDecodeV3) {
  const int64_t H = 128, kvl = 512, rope = 64, L = kvl + rope, bs = 64;
  for (auto [B, ctx] : {std::pair<int64_t, int64_t>{64, 4096}, {128, 4096}, {1, 32768}}) {
    const int64_t per = ctx / bs, nblocks = B * per;
    std::vector<int32_t> table(B * per), qs(B + 1), lens(B, static_cast<int32_t>(ctx));
    for (int64_t i = 0; i < B * per; ++i) table[i] = static_cast<int32_t>(i);
    for (int64_t s = 0; s <= B; ++s) qs[s] = static_cast<int32_t>(s);
    Dev<__nv_bfloat16> cache(ToBf16(RandomF(nblocks * bs * L)));
    Dev<float> q(RandomF(B * H * L, -0.1f, 0.1f)), out(B * H * kvl);
    Dev<int32_t> dt(table), dqs(qs), dl(lens);
    Dev<float> ws(MlaDecodeWorkspaceFloats(B, H, kvl, ctx, 256));
    MlaDecodeParams p{};
    p.q = q.get(); p.q_tok_stride = H * L; p.q_head_stride = L; p.cache = cache.get(); p.num_tokens = B; p.num_seqs = B;
    p.heads = H; p.kv_lora = kvl; p.rope_dim = rope; p.block_size = bs; p.query_start = dqs.get(); p.context_lens = dl.get();
    p.block_table = dt.get(); p.max_blocks = per; p.max_context = ctx; p.kv_chunk = 256; p.softmax_scale = 0.1f;
    p.workspace = ws.get(); p.out = out.get(); p.o_tok_stride = H * kvl; p.o_head_stride = kvl;
    const float ms = MedianMs([&] { MlaDecodeAttention(p); });
    const double flops = 2.0 * H * B * ctx * (L + kvl), bytes = double(B) * ctx * L * 2;
    std::printf("[perf] mla_decode heads=128 batch=%lld ctx=%lld: %.1f us, %.0f TFLOP/s, %.2f TB/s (FlashMLA anchor: batch 64 4K 134.9 us)\n",
                (long long)B, (long long)ctx, ms * 1e3, flops / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e12);
  }
}

TEST(CudaPerf, GroupedGemmDecodeV3) {
  // 64 decode tokens, top-8 of 256 experts, FP8 gate/up [256, 4096, 7168]: reads every expert.
  const int64_t n = 64, k = 8, E = 256, N = 4096, K = 7168;
  std::vector<int32_t> ids(n * k);
  for (int64_t i = 0; i < n * k; ++i) ids[i] = static_cast<int32_t>((i * 37 + i / k) % E);
  const int64_t cap = PermuteCapacity(n, k, E, kGroupedGemmRowAlign);
  Dev<int32_t> dids(ids), offs(E + 1), pos(n * k), src(cap), wsp(2 * E);
  Dev<__nv_bfloat16> x(ToBf16(RandomF(n * K))), xp(cap * K);
  Dev<uint8_t> w(E * N * K);
  DS_CUDA_CHECK(cudaMemset(w.get(), 0x38, E * N * K));
  Dev<float> sc(std::vector<float>(E * (N / 128) * (K / 128), 1e-3f)), y(cap * N);
  MoePermute({dids.get(), n, k, E, kGroupedGemmRowAlign, x.get(), K, K, offs.get(), pos.get(), src.get(), xp.get(), wsp.get(), nullptr});
  GroupedGemmParams g{};
  g.a = xp.get(); g.lda = K; g.offsets = offs.get(); g.max_rows = cap; g.w = w.get(); g.w_fp8 = true; g.w_scales = sc.get();
  g.num_experts = E; g.N = N; g.K = K; g.out = y.get(); g.out_type = DTypeOut::kF32; g.ldo = N;
  const float ms = MedianMs([&] { GroupedGemm(g); });
  const double bytes = double(E) * N * K;
  std::printf("[perf] grouped_gemm_fp8 decode gate_up E=256 N=4096 K=7168 tokens=64 top8: %.2f ms, %.2f TB/s of weights\n", ms,
              bytes / (ms * 1e-3) / 1e12);
}

}  // namespace
}  // namespace ds::cuda::test
