// SiLU-and-mul (+ fused FP8 quantisation) vs ds::cpu::SiluAndMul (+ Fp8QuantizePerTokenGroup);
// its bf16 output vs SplitBf16 of its fp32 output, bit for bit (fused_silu16's contract).
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/silu_and_mul.h"
#include "test_util.h"
// After test_util.h: its ToBf16 must see ds::F32ToBf16, not runner_kernels.h's launcher.
#include "backend/cuda/runner_kernels.h"

namespace ds::cuda::test {
namespace {

void RunCase(int64_t n, int64_t inter, const char* name) {
  auto gu = RandomNormal(n * 2 * inter, 2.f);
  std::vector<float> ref(n * inter);
  cpu::SiluAndMul({gu.data(), 2 * inter, ref.data(), inter, n, inter});
  Dev<float> dgu(gu);
  Dev<float> out32(n * inter);
  SiluAndMul({dgu.get(), 2 * inter, out32.get(), inter, DTypeOut::kF32, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, n, inter, nullptr});
  ExpectClose("silu_and_mul", std::string(name) + "_f32", out32.Download(), ref, 1e-6);
  // bf16 output + FP8 codes in one pass.
  const int64_t groups = (inter + 127) / 128;
  Dev<__nv_bfloat16> out16(n * inter);
  Dev<uint8_t> dq(n * inter);
  Dev<float> ds(n * groups);
  SiluAndMul({dgu.get(), 2 * inter, out16.get(), inter, DTypeOut::kBF16, dq.get(), inter, ds.get(), ScaleLayout::kTokenMajor, n,
              inter, nullptr});
  ExpectClose("silu_and_mul", std::string(name) + "_bf16", FromBf16(out16.Download()), ref, 4e-3);
  std::vector<uint8_t> q_ref(n * inter);
  std::vector<float> s_ref(n * groups);
  cpu::Fp8QuantizePerTokenGroup({ref.data(), n, inter, 128, q_ref.data(), s_ref.data()});
  auto q = dq.Download();
  // Codes may differ by one step where expf rounds differently: compare dequantised values.
  std::vector<float> dq_got(n * inter), dq_ref(n * inter);
  auto s = ds.Download();
  int64_t mismatch = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < inter; ++i) {
      dq_got[t * inter + i] = Fp8E4M3ToF32(q[t * inter + i]) * s[t * groups + i / 128];
      dq_ref[t * inter + i] = Fp8E4M3ToF32(q_ref[t * inter + i]) * s_ref[t * groups + i / 128];
      mismatch += q[t * inter + i] != q_ref[t * inter + i];
    }
  std::printf("[metric] op=silu_and_mul_fp8 case=%s code_mismatch_frac=%.3e\n", name, double(mismatch) / (n * inter));
  EXPECT_LE(mismatch, n * inter / 1000 + 1) << name;
  ExpectClose("silu_and_mul_fp8_dequant", name, dq_got, dq_ref, 1e-3);
}

TEST(CudaSiluAndMul, MatchesCpu) {
  RunCase(64, 2048, "moe_inter_M64");
  RunCase(1, 18432, "dense_inter_M1");
  RunCase(3, 100, "odd_inter100");
}

// CudaRunnerOptions::fused_silu16: the bf16 output must be exactly what the unfused runner's
// down projection reads, the SplitBf16 hi (__float2bfloat16_rn) of the fp32 output, for every
// element (the kernel computes the same fp32 expression in both instantiations). Shapes: V3's
// and V2-Lite's dense MLPs (I 18432, 10944) and shared experts (2048, 2816), the fixtures'
// (320, 80, 192, 160), an odd width; the decode sizes (1-16 rows) and a prefill size.
TEST(CudaSiluAndMul, Bf16OutputIsSplitOfF32) {
  struct Case { int64_t n, inter; };
  for (const Case c : {Case{1, 18432}, Case{3, 10944}, Case{16, 2048}, Case{1, 2816}, Case{9, 320}, Case{5, 80},
                       Case{2, 192}, Case{16, 160}, Case{7, 100}, Case{70, 2816}}) {
    const int64_t n = c.n, I = c.inter;
    // Wide inputs (std 4): large and tiny products, ties and near-ties of the bf16 rounding.
    Dev<float> dgu(RandomNormal(n * 2 * I, 4.f));
    Dev<float> out32(n * I);
    Dev<__nv_bfloat16> out16(n * I), split16(n * I);
    SiluAndMul({dgu.get(), 2 * I, out32.get(), I, DTypeOut::kF32, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, n, I,
                nullptr});
    SiluAndMul({dgu.get(), 2 * I, out16.get(), I, DTypeOut::kBF16, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, n,
                I, nullptr});
    SplitBf16(out32.get(), I, n, I, split16.get(), nullptr, I, nullptr);
    const auto a = out16.Download(), b = split16.Download();
    int64_t differ = 0;
    for (int64_t i = 0; i < n * I; ++i) differ += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
    std::printf("[metric] op=silu_and_mul_bf16_vs_split case=n%lld_I%lld differing=%lld (0 expected)%s\n",
                (long long)n, (long long)I, (long long)differ, differ == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(differ, 0) << "n=" << n << " I=" << I;
  }
}

}  // namespace
}  // namespace ds::cuda::test
