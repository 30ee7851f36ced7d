// MlaKvRope (mla_kv_rope_fused.h, the runner's fused_kvrope) vs the three launches it replaces,
// RmsNorm (c_kv in place) + ApplyRope (q, with and without RopeParams::out2, the fused_qpe q_pe
// copy into q_lat) + RopeAndWriteKvCache (rope(k_pe) and [c_kv | k_pe] into the paged bf16
// cache), bit for bit: lat (normalised c_kv, untouched k_pe), q, q_lat (q_pe slots written, the
// latent part left poisoned) and the whole cache (rows not written left poisoned). Shapes: V3
// (128 heads, kv_lora 512, rope 64, nope 128) and V2-Lite (16 heads) at T = 1..16, the fixtures'
// MLA dims (v3_tiny, v2_lite_tiny, v3_mla512_tiny, v3_rotate_half_tiny), odd dims and a
// kv_lora >= 1024 (RmsNorm's 1024-thread block); interleaved and rotate-half RoPE; a negative
// slot (no cache row) and an out-of-range position (no rotation) in the longer cases. Not yet
// run on the GPU (written without a device).
#include <cstring>

#include "backend/cuda/mla_kv_rope_fused.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

template <typename T>
int64_t BitsDiffer(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t c = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) c += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return c;
}

struct Dims { const char* name; int64_t H, nope, rd, kvl; };

void RunCase(const Dims& d, int64_t n, bool interleave, bool out2) {
  const std::string cas = std::string(d.name) + "_T" + std::to_string(n) + (interleave ? "_interleave" : "_rotate_half") +
                          (out2 ? "_out2" : "");
  const int64_t H = d.H, rd = d.rd, kvl = d.kvl, dqk = d.nope + rd, L = kvl + rd, max_pos = 4096;
  const int64_t num_slots = 256;  // cache rows (one layer); slots (t * 37 + 11) % 256 are distinct for t < 256
  const float eps = 1e-6f;
  const auto cosv = RandomF(max_pos * rd / 2), sinv = RandomF(max_pos * rd / 2);
  const auto lat = RandomNormal(n * L), q = RandomNormal(n * H * dqk), weight = RandomF(kvl, 0.5f, 1.5f);
  std::vector<int32_t> pos(n);
  std::vector<int64_t> slots(n);
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = static_cast<int32_t>((t * 977 + 5) % max_pos);
    slots[t] = (t * 37 + 11) % num_slots;
  }
  if (n >= 4) {
    slots[1] = -1;                               // no cache row (the norm and the q rope still run)
    pos[2] = static_cast<int32_t>(max_pos);      // out of range: neither q nor k_pe rotated
  }
  Dev<float> dcos(cosv), dsin(sinv), dw(weight);
  Dev<int32_t> dpos(pos);
  Dev<int64_t> dslots(slots);
  // [0]: unfused, [1]: fused. q_lat [n, H, L] and the cache [num_slots, L] start poisoned.
  Dev<float> dlat0(lat), dlat1(lat), dq0(q), dq1(q), qlat0(n * H * L), qlat1(n * H * L);
  Dev<__nv_bfloat16> cache0(num_slots * L), cache1(num_slots * L);

  RmsNorm({dlat0.get(), L, nullptr, 0, dw.get(), dlat0.get(), L, DTypeOut::kF32, n, kvl, eps, nullptr});
  RopeParams rq{dq0.get(), n, H, H * dqk, dqk, d.nope, rd, dpos.get(), dcos.get(), dsin.get(), max_pos, interleave, nullptr};
  if (out2) { rq.out2 = qlat0.get() + kvl; rq.out2_token_stride = H * L; rq.out2_head_stride = L; }
  ApplyRope(rq);
  RopeAndWriteKvCache({dlat0.get(), L, dlat0.get() + kvl, L, dpos.get(), dslots.get(), dcos.get(), dsin.get(), max_pos,
                       n, kvl, rd, interleave, cache0.get(), nullptr});

  MlaKvRopeParams p{};
  p.lat = dlat1.get(); p.ld_lat = L; p.norm_weight = dw.get(); p.eps = eps;
  p.n = n; p.kv_lora = kvl; p.rope_dim = rd;
  p.q = dq1.get(); p.heads = H; p.q_token_stride = H * dqk; p.q_head_stride = dqk; p.q_offset = d.nope;
  if (out2) { p.q_out2 = qlat1.get() + kvl; p.q_out2_token_stride = H * L; p.q_out2_head_stride = L; }
  p.positions = dpos.get(); p.slots = dslots.get(); p.cos = dcos.get(); p.sin = dsin.get();
  p.max_pos = max_pos; p.interleave = interleave; p.cache = cache1.get();
  MlaKvRope(p);
  DS_CUDA_CHECK(cudaGetLastError());

  const auto lat0 = dlat0.Download(), lat1 = dlat1.Download(), q0 = dq0.Download(), q1 = dq1.Download();
  const auto ql0 = qlat0.Download(), ql1 = qlat1.Download();
  const auto c0 = cache0.Download(), c1 = cache1.Download();
  const int64_t lat_bits = BitsDiffer(lat0, lat1), q_bits = BitsDiffer(q0, q1), qlat_bits = BitsDiffer(ql0, ql1),
                cache_bits = BitsDiffer(c0, c1);
  // The work was done: c_kv changed (normalised), every written cache row finite, q_lat's q_pe
  // slots finite (out2) or all poisoned (no out2).
  int64_t lat_unchanged = 0, cache_nonfinite = 0, qpe_nonfinite = 0, qlat_latent_touched = 0;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < kvl; ++i) lat_unchanged += std::memcmp(&lat1[t * L + i], &lat[t * L + i], 4) == 0;
    const bool rotated = pos[t] >= 0 && pos[t] < max_pos;
    if (slots[t] >= 0)
      for (int64_t i = 0; i < (rotated ? L : kvl); ++i)
        cache_nonfinite += !std::isfinite(__bfloat162float(c1[slots[t] * L + i]));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < kvl; ++i) qlat_latent_touched += !std::isnan(ql1[(t * H + h) * L + i]);
      if (out2 && rotated)
        for (int64_t i = 0; i < rd; ++i) qpe_nonfinite += !std::isfinite(ql1[(t * H + h) * L + kvl + i]);
    }
  }
  const bool pass = lat_bits == 0 && q_bits == 0 && qlat_bits == 0 && cache_bits == 0 && cache_nonfinite == 0 &&
                    qpe_nonfinite == 0 && qlat_latent_touched == 0 && lat_unchanged < n * kvl / 8;
  std::printf("[metric] op=mla_kv_rope_fused case=%s lat_bits=%lld q_bits=%lld q_lat_bits=%lld cache_bits=%lld "
              "cache_nonfinite=%lld qpe_nonfinite=%lld (bit-identical expected)%s\n",
              cas.c_str(), (long long)lat_bits, (long long)q_bits, (long long)qlat_bits, (long long)cache_bits,
              (long long)cache_nonfinite, (long long)qpe_nonfinite, pass ? " PASS" : " FAIL");
  EXPECT_EQ(lat_bits, 0) << cas;
  EXPECT_EQ(q_bits, 0) << cas;
  EXPECT_EQ(qlat_bits, 0) << cas;
  EXPECT_EQ(cache_bits, 0) << cas;
  EXPECT_EQ(cache_nonfinite, 0) << cas;
  EXPECT_EQ(qpe_nonfinite, 0) << cas;
  EXPECT_EQ(qlat_latent_touched, 0) << cas;
  EXPECT_LT(lat_unchanged, n * kvl / 8) << cas << ": c_kv was not normalised";
}

TEST(CudaMlaKvRopeFused, MatchesNormRopeAndCacheWriteV3AndV2Lite) {
  const Dims v3{"v3", 128, 128, 64, 512}, v2lite{"v2lite", 16, 128, 64, 512};
  for (int64_t n = 1; n <= 16; ++n)
    for (bool interleave : {true, false})
      for (bool out2 : {false, true}) {
        RunCase(v3, n, interleave, out2);
        RunCase(v2lite, n, interleave, out2);
      }
}

TEST(CudaMlaKvRopeFused, MatchesNormRopeAndCacheWriteFixtureAndOddDims) {
  const Dims dims[] = {
      {"v3_tiny", 4, 24, 16, 48},          {"v2_lite_tiny", 4, 16, 16, 32},
      {"v3_mla512_tiny", 3, 128, 64, 512}, {"v3_rotate_half_tiny", 2, 16, 16, 32},
      {"odd", 5, 32, 16, 40},              {"odd_wide_rope", 9, 8, 256, 300},
      {"kvl1000", 7, 16, 32, 1000},        {"kvl1536", 33, 16, 32, 1536},  // 1024-thread blocks
  };
  for (const Dims& d : dims)
    for (int64_t n : {1, 2, 5, 16})
      for (bool interleave : {true, false})
        for (bool out2 : {false, true}) RunCase(d, n, interleave, out2);
}

}  // namespace
}  // namespace ds::cuda::test
