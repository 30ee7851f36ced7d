// Per-token-group FP8 quantisation vs ds::cpu::Fp8QuantizePerTokenGroup: codes and scales
// must be identical (same division, same round-to-nearest-even saturating e4m3 encoding).
#include "backend/cpu/ops.h"
#include "backend/cuda/fp8_quant.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(int64_t n, int64_t k, ScaleLayout layout, bool bf16_in, const char* name) {
  auto x = RandomNormal(n * k, 2.0f);
  if (bf16_in) x = RoundBf16Vec(x);
  if (n * k > 300) for (int64_t i = 0; i < std::min<int64_t>(k, 128); ++i) x[i] = 0.f;  // a zero group
  const int64_t groups = (k + 127) / 128;
  std::vector<uint8_t> q_ref(n * k);
  std::vector<float> s_ref(n * groups);
  cpu::Fp8QuantizePerTokenGroup({x.data(), n, k, 128, q_ref.data(), s_ref.data()});
  Dev<float> dx(x);
  Dev<__nv_bfloat16> dxb(ToBf16(x));
  Dev<uint8_t> dq(n * k);
  Dev<float> ds(n * groups);
  Fp8QuantizePerTokenGroup({bf16_in ? static_cast<const void*>(dxb.get()) : dx.get(), bf16_in, k, n, k, 128, dq.get(), k,
                            ds.get(), layout, nullptr});
  auto q = dq.Download();
  auto s = ds.Download();
  int64_t code_mismatch = 0;
  for (int64_t i = 0; i < n * k; ++i) code_mismatch += q[i] != q_ref[i];
  std::vector<float> s_got(n * groups);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < groups; ++g)
      s_got[t * groups + g] = layout == ScaleLayout::kTokenMajor ? s[t * groups + g] : s[g * n + t];
  std::printf("[metric] op=fp8_quant case=%s n=%lld k=%lld code_mismatches=%lld\n", name, (long long)n, (long long)k,
              (long long)code_mismatch);
  EXPECT_EQ(code_mismatch, 0) << name;
  ExpectClose("fp8_quant_scales", name, s_got, s_ref, 0.0);
}

TEST(CudaFp8Quant, MatchesCpu) {
  RunCase(64, 7168, ScaleLayout::kTokenMajor, false, "hidden_M64_token_major");
  RunCase(64, 7168, ScaleLayout::kGroupMajor, true, "hidden_M64_group_major_bf16in");
  RunCase(1, 2048, ScaleLayout::kGroupMajor, false, "moe_inter_M1");
  RunCase(5, 200, ScaleLayout::kTokenMajor, false, "odd_k200");
  RunCase(3, 18432, ScaleLayout::kGroupMajor, false, "dense_inter_M3");
}

}  // namespace
}  // namespace ds::cuda::test
