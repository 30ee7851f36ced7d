// RoPE (YaRN tables from the CPU) vs ds::cpu::ApplyRope, and the fused rope + latent cache
// write vs CPU rope followed by a bf16 row write.
#include "backend/cpu/ops.h"
#include "backend/cuda/rope.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Tables { std::vector<float> cos, sin; int64_t max_pos, rope_dim; };

Tables V3Tables(int64_t max_pos, int64_t rope_dim) {
  Tables t{std::vector<float>(max_pos * rope_dim / 2), std::vector<float>(max_pos * rope_dim / 2), max_pos, rope_dim};
  cpu::RopeTableParams p{};
  p.rope_dim = rope_dim; p.max_pos = max_pos; p.theta = 10000; p.yarn = true; p.factor = 40; p.beta_fast = 32;
  p.beta_slow = 1; p.mscale = 1; p.mscale_all_dim = 1; p.original_max_pos = 4096; p.truncate = true;
  p.cos = t.cos.data(); p.sin = t.sin.data();
  cpu::ComputeRopeTables(p);
  return t;
}

std::vector<int32_t> RandomPositions(int64_t n, int64_t max_pos) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(max_pos - 1));
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(Rng());
  return v;
}

void RunQCase(int64_t n, int64_t heads, int64_t nope, int64_t rope, bool interleave, const char* name) {
  Tables tb = V3Tables(8192, rope);
  const int64_t dqk = nope + rope;
  auto q = RandomNormal(n * heads * dqk);
  auto pos = RandomPositions(n, tb.max_pos);
  std::vector<float> ref = q;
  cpu::ApplyRope({ref.data(), n, heads, heads * dqk, dqk, nope, rope, pos.data(), tb.cos.data(), tb.sin.data(), tb.max_pos, interleave});
  Dev<float> dq(q), dcos(tb.cos), dsin(tb.sin);
  Dev<int32_t> dpos(pos);
  ApplyRope({dq.get(), n, heads, heads * dqk, dqk, nope, rope, dpos.get(), dcos.get(), dsin.get(), tb.max_pos, interleave, nullptr});
  ExpectClose("rope", std::string(name) + (interleave ? "_interleave" : "_rotate_half"), dq.Download(), ref, 1e-6);
}

void RunCache(int64_t n, int64_t kv_lora, int64_t rope, bool interleave, const char* name) {
  Tables tb = V3Tables(4096, rope);
  const int64_t L = kv_lora + rope, num_slots = 64 * 40;
  auto lat = RandomNormal(n * L);
  auto pos = RandomPositions(n, tb.max_pos);
  std::vector<int64_t> slots(n);
  std::vector<int32_t> perm(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), Rng());
  for (int64_t i = 0; i < n; ++i) slots[i] = perm[i];
  // CPU: rope the k_pe channels (one head), then the row goes to the cache (rounded to bf16).
  std::vector<float> ref_rows = lat;
  cpu::ApplyRope({ref_rows.data(), n, 1, L, L, kv_lora, rope, pos.data(), tb.cos.data(), tb.sin.data(), tb.max_pos, interleave});
  Dev<float> dlat(lat), dcos(tb.cos), dsin(tb.sin);
  Dev<int32_t> dpos(pos);
  Dev<int64_t> dslots(slots);
  Dev<__nv_bfloat16> cache(num_slots * L);
  RopeAndWriteKvCache({dlat.get(), L, dlat.get() + kv_lora, L, dpos.get(), dslots.get(), dcos.get(), dsin.get(), tb.max_pos,
                       n, kv_lora, rope, interleave, cache.get(), nullptr});
  auto c = FromBf16(cache.Download());
  std::vector<float> got, ref;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < L; ++j) {
      got.push_back(c[slots[i] * L + j]);
      ref.push_back(RoundBf16(ref_rows[i * L + j]));
    }
  ExpectClose("rope_kv_cache_write", name, got, ref, 1e-3);
}

TEST(CudaRope, MatchesCpu) {
  for (bool il : {true, false}) {
    RunQCase(64, 128, 128, 64, il, "q_V3_M64");
    RunQCase(1, 128, 128, 64, il, "q_V3_M1");
    RunQCase(5, 3, 4, 6, il, "odd_rope6");
  }
}

TEST(CudaRope, KvCacheWriteMatchesCpu) {
  RunCache(100, 512, 64, true, "V3_interleave");
  RunCache(1, 512, 64, false, "V3_M1_rotate_half");
  RunCache(7, 32, 16, true, "tiny");
}

}  // namespace
}  // namespace ds::cuda::test
