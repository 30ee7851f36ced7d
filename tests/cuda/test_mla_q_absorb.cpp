// MlaQAbsorb (mla_q_absorb.h, the runner's fused_q_absorb) against a double CPU reference of
// q_lat[t, h, c] = sum_d bf16(q[t, h, d]) * W_UK_h^T[c, d]: the inputs are bf16-exact, so the
// only error is the kernel's fp32 accumulation (bound: relative L2 1e-5). The output columns
// past kv_lora of each head (q_lat's q_pe slots) and the rows past `tokens` must stay poisoned
// (unwritten). Shapes: V2-Lite (16 heads) and V3 (128 heads) at nope 128 / kv_lora 512 for 1..8
// tokens, nope 64 and 256, a kv_lora that leaves part of a block idle (96), direct launches and
// graph replays; rejected shapes.
#include <cmath>
#include <cstring>

#include "backend/cuda/mla_q_absorb.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case { const char* name; int64_t H, nope, kvl, T; };

void RunCase(const Case& c, bool graph) {
  const int64_t H = c.H, nope = c.nope, kvl = c.kvl, T = c.T;
  const int64_t dqk = nope + 64, L = kvl + 64;  // q rows as the runner's [T, H, nope + rope]; q_lat [T, H, kvl + rope]
  const std::string label = std::string(c.name) + " T=" + std::to_string(T) + (graph ? " graph" : " direct");
  const std::vector<float> q = RandomNormal(T * H * dqk, 1.f);
  const std::vector<float> wf = RoundBf16Vec(RandomNormal(H * kvl * nope, 0.05f));
  Dev<float> d_q(q), d_out(8 * H * L);  // room for 8 tokens: rows >= T must stay poisoned
  Dev<__nv_bfloat16> d_w(ToBf16(wf));
  MlaQAbsorbParams p{};
  p.q = d_q.get(); p.q_tok_stride = H * dqk; p.q_head_stride = dqk;
  p.w_uk_t = d_w.get(); p.tokens = T; p.heads = H; p.nope = nope; p.kv_lora = kvl;
  p.out = d_out.get(); p.out_tok_stride = H * L; p.out_head_stride = L;
  ASSERT_EQ(MlaQAbsorbUnsupported(p), "") << label;
  LaunchRepeated(graph, 2, [&](cudaStream_t st) { MlaQAbsorbParams r = p; r.stream = st; MlaQAbsorb(r); },
                 [&] { d_out.Poison(); });
  const std::vector<float> out = d_out.Download();
  std::vector<float> got, ref;
  int64_t written_tail = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + t * H * dqk + h * dqk;
      for (int64_t col = 0; col < L; ++col) {
        const float v = out[t * H * L + h * L + col];
        if (col >= kvl) { written_tail += !std::isnan(v); continue; }
        double s = 0;
        const float* wr = wf.data() + (h * kvl + col) * nope;
        for (int64_t d = 0; d < nope; ++d) s += double(RoundBf16(qh[d])) * wr[d];
        got.push_back(v);
        ref.push_back(static_cast<float>(s));
      }
    }
  int64_t written_rows = 0;  // outputs of tokens >= T
  for (int64_t i = T * H * L; i < 8 * H * L; ++i) written_rows += !std::isnan(out[i]);
  ExpectClose("mla_q_absorb", label, got, ref, 1e-5);
  EXPECT_EQ(written_tail, 0) << label << ": wrote past kv_lora";
  EXPECT_EQ(written_rows, 0) << label << ": wrote rows past tokens";
}

TEST(CudaMlaQAbsorb, MatchesCpuReference) {
  const Case cases[] = {
      {"V2Lite_16h", 16, 128, 512, 1}, {"V2Lite_16h", 16, 128, 512, 2}, {"V2Lite_16h", 16, 128, 512, 5},
      {"V2Lite_16h", 16, 128, 512, 8}, {"V3_128h", 128, 128, 512, 1},   {"V3_128h", 128, 128, 512, 4},
      {"nope64_kvl96", 3, 64, 96, 3},  {"nope256_kvl32", 2, 256, 32, 7},
  };
  for (const Case& c : cases)
    for (bool graph : {false, true}) RunCase(c, graph);
}

TEST(CudaMlaQAbsorb, RejectsUnsupported) {
  MlaQAbsorbParams p{};
  p.tokens = 9; p.heads = 16; p.nope = 100; p.kv_lora = 20;
  const std::string why = MlaQAbsorbUnsupported(p);
  for (const char* part : {"tokens 9", "nope 100", "kv_lora 20", "null pointer"})
    EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;
  p.tokens = 0; p.nope = 512;
  const std::string why2 = MlaQAbsorbUnsupported(p);
  EXPECT_NE(why2.find("tokens 0"), std::string::npos) << why2;
  EXPECT_NE(why2.find("nope 512"), std::string::npos) << why2;
}

}  // namespace
}  // namespace ds::cuda::test
