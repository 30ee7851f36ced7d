// ApplyRope's q_pe copy (RopeParams::out2: absorbed MLA's q_lat tail, the runner's fused_qpe)
// vs ApplyRope followed by the Copy2D it replaces, bit for bit, and the in-place rotation vs
// ds::cpu::ApplyRope; V3 (128 heads, kv_lora 512) and V2-Lite (16 heads) shapes, T = 1..16,
// both RoPE layouts; q_lat's latent part must stay untouched (poisoned bytes survive).
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/rope.h"
#include "test_util.h"
// After test_util.h: its ToBf16 must see ds::F32ToBf16, not runner_kernels.h's launcher.
#include "backend/cuda/runner_kernels.h"

namespace ds::cuda::test {
namespace {

void RunCase(int64_t n, int64_t H, int64_t nope, int64_t rd, int64_t kvl, bool interleave) {
  const std::string cas = std::string("H") + std::to_string(H) + "_T" + std::to_string(n) + (interleave ? "_interleave" : "_rotate_half");
  const int64_t dqk = nope + rd, L = kvl + rd, max_pos = 4096;
  std::vector<float> cosv(max_pos * rd / 2), sinv(max_pos * rd / 2);
  cpu::RopeTableParams tp{};
  tp.rope_dim = rd; tp.max_pos = max_pos; tp.theta = 10000; tp.yarn = true; tp.factor = 40; tp.beta_fast = 32;
  tp.beta_slow = 1; tp.mscale = 1; tp.mscale_all_dim = 1; tp.original_max_pos = 4096; tp.truncate = true;
  tp.cos = cosv.data(); tp.sin = sinv.data();
  cpu::ComputeRopeTables(tp);
  auto q = RandomNormal(n * H * dqk);
  std::vector<int32_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>((t * 977 + 5) % max_pos);
  std::vector<float> ref = q;
  cpu::ApplyRope({ref.data(), n, H, H * dqk, dqk, nope, rd, pos.data(), cosv.data(), sinv.data(), max_pos, interleave});
  Dev<float> dq1(q), dq2(q), dcos(cosv), dsin(sinv), lat1(n * H * L), lat2(n * H * L);  // lat*: poisoned (NaN bytes)
  Dev<int32_t> dpos(pos);
  RopeParams p{dq1.get(), n, H, H * dqk, dqk, nope, rd, dpos.get(), dcos.get(), dsin.get(), max_pos, interleave, nullptr};
  ApplyRope(p);
  Copy2D(dq1.get() + nope, dqk, lat1.get() + kvl, L, n * H, rd, nullptr);
  p.x = dq2.get();
  p.out2 = lat2.get() + kvl; p.out2_token_stride = H * L; p.out2_head_stride = L;
  ApplyRope(p);
  const auto a = lat1.Download(), b = lat2.Download(), q1 = dq1.Download(), q2 = dq2.Download();
  const int64_t lat_bits = [&] { int64_t c = 0; for (size_t i = 0; i < a.size(); ++i) c += std::memcmp(&a[i], &b[i], 4) != 0; return c; }();
  const int64_t q_bits = [&] { int64_t c = 0; for (size_t i = 0; i < q1.size(); ++i) c += std::memcmp(&q1[i], &q2[i], 4) != 0; return c; }();
  std::printf("[metric] op=rope_qpe_copy case=%s q_lat_vs_copy2d_bits=%lld q_bits=%lld%s\n", cas.c_str(), (long long)lat_bits,
              (long long)q_bits, lat_bits == 0 && q_bits == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(lat_bits, 0) << cas;
  EXPECT_EQ(q_bits, 0) << cas;
  // The q_pe slots are finite rotated values (vs the CPU), the latent part still poisoned.
  std::vector<float> got_pe, ref_pe;
  int64_t latent_touched = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < rd; ++i) {
        got_pe.push_back(b[(t * H + h) * L + kvl + i]);
        ref_pe.push_back(ref[(t * H + h) * dqk + nope + i]);
      }
      for (int64_t i = 0; i < kvl; ++i) latent_touched += !std::isnan(b[(t * H + h) * L + i]);
    }
  EXPECT_EQ(latent_touched, 0) << cas;
  ExpectClose("rope_qpe_copy_vs_cpu", cas, got_pe, ref_pe, 1e-6);
}

TEST(CudaRopeQpeCopy, MatchesRopeThenCopy2D) {
  for (int64_t n = 1; n <= 16; ++n) {
    RunCase(n, 128, 128, 64, 512, true);   // V3
    RunCase(n, 16, 128, 64, 512, true);    // V2-Lite
  }
  RunCase(3, 16, 128, 64, 512, false);
  RunCase(2, 5, 32, 16, 40, false);        // odd dims
}

}  // namespace
}  // namespace ds::cuda::test
