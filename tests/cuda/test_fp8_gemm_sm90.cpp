// Fp8GemmSm90 (CUTLASS FP8 block-scaled GEMM at prefill sizes, GemmFp8's orientation) vs the CPU
// GEMM on dequantised operands for every configuration, and vs cuBLASLt's GemmFp8 on the same
// codes at DeepSeek-V3's kv_a / kv_b shapes (informational: both round to bf16).
#include "backend/cpu/ops.h"
#include "backend/cuda/fp8_gemm_sm90.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/gemm.h"

#include <memory>
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Shape { int64_t M, N, K; const char* name; };

const Fp8GemmSm90Config kConfigs[] = {Fp8GemmSm90Config::kCoop128StreamK, Fp8GemmSm90Config::kCoop128Cluster2,
                                      Fp8GemmSm90Config::kPingpong64, Fp8GemmSm90Config::kCoop128DataParallel};

struct Operands {
  Shape s;
  int64_t Mp, kb, nb, sld;
  std::vector<uint8_t> wq;
  std::vector<float> ws_cpu;
  std::unique_ptr<Dev<uint8_t>> dxq, dwq;
  std::unique_ptr<Dev<float>> dxs, dws, dws_mn;
  explicit Operands(const Shape& sh) : s(sh) {
    Mp = Fp8PaddedM(s.M); kb = (s.K + 127) / 128; nb = (s.N + 127) / 128; sld = Fp8WeightScaleLd(s.K);
    auto x = RandomNormal(s.M * s.K);
    wq.resize(s.N * s.K);
    std::uniform_int_distribution<int> code(0, 255);
    for (auto& c : wq) { int v = code(Rng()); if ((v & 0x7f) == 0x7f) v = 0x3f; c = static_cast<uint8_t>(v); }
    std::vector<float> ws(nb * sld, 0.f);
    ws_cpu.resize(nb * kb);
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j < kb; ++j) ws[i * sld + j] = ws_cpu[i * kb + j] = std::ldexp(1.0f, -8) * (1 + (2 * i + j) % 7);
    Dev<float> dx(x);
    dxq = std::make_unique<Dev<uint8_t>>(Mp * s.K);
    dwq = std::make_unique<Dev<uint8_t>>(wq);
    dxs = std::make_unique<Dev<float>>(kb * Mp);
    dws = std::make_unique<Dev<float>>(ws);
    dws_mn = std::make_unique<Dev<float>>(kb * nb);
    DS_CUDA_CHECK(cudaMemset(dxq->get(), 0, Mp * s.K));
    DS_CUDA_CHECK(cudaMemset(dxs->get(), 0, kb * Mp * sizeof(float)));
    Fp8QuantParams qp{dx.get(), false, s.K, s.M, s.K, 128, dxq->get(), s.K, dxs->get(), ScaleLayout::kGroupMajor, nullptr};
    qp.scale_ld = Mp;
    Fp8QuantizePerTokenGroup(qp);
    Fp8TransposeWeightScales(dws->get(), sld, s.N, s.K, dws_mn->get(), nullptr);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  GemmFp8Params G(void* y) const {
    return {dxq->get(), s.K, dxs->get(), dwq->get(), s.K, dws->get(), sld, y, s.N, DTypeOut::kBF16, s.M, s.N, s.K, nullptr};
  }
  std::vector<float> Reference() const {
    auto xq = dxq->Download();
    auto xs = dxs->Download();
    std::vector<float> xd(s.M * s.K), wd(s.N * s.K), ref(s.M * s.N);
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t k = 0; k < s.K; ++k) xd[m * s.K + k] = Fp8E4M3ToF32(xq[m * s.K + k]) * xs[(k / 128) * Mp + m];
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k) wd[n * s.K + k] = Fp8E4M3ToF32(wq[n * s.K + k]) * ws_cpu[(n / 128) * kb + k / 128];
    cpu::Gemm({xd.data(), s.K, wd.data(), s.K, ref.data(), s.N, s.M, s.N, s.K, false});
    return ref;
  }
};

std::vector<float> RunConfig(const Operands& o, Fp8GemmSm90Config c) {
  Dev<__nv_bfloat16> dy(o.Mp * o.s.N);
  Fp8GemmSm90Params p{};
  p.g = o.G(dy.get());
  p.w_scales_mn = o.dws_mn->get();
  p.config = c;
  const std::string why = Fp8GemmSm90Unsupported(p);
  EXPECT_TRUE(why.empty()) << o.s.name << ": " << why;
  const size_t bytes = Fp8GemmSm90WorkspaceBytes(o.s.M, o.s.N, o.s.K, c);
  std::unique_ptr<Dev<uint8_t>> ws;
  if (bytes > 0) ws = std::make_unique<Dev<uint8_t>>(bytes);
  p.workspace = ws ? ws->get() : nullptr;
  p.workspace_bytes = bytes;
  Fp8GemmSm90(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  auto got = FromBf16(dy.Download());
  got.resize(o.s.M * o.s.N);
  return got;
}

TEST(CudaFp8GemmSm90, MatchesCpuEveryConfig) {
  if (!Fp8GemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const Shape shapes[] = {{200, 576, 7168, "kv_a_M200"}, {256, 2048, 512, "kv_b_like_M256"},
                          {130, 272, 1024, "odd_M130_N272"}, {64, 1536, 2048, "M64"}};
  for (const auto& s : shapes) {
    Operands o(s);
    const auto ref = o.Reference();
    for (auto c : kConfigs)
      ExpectClose("fp8_gemm_sm90", std::string(s.name) + "_config" + std::to_string(static_cast<int>(c)), RunConfig(o, c), ref,
                  5e-3);
  }
}

// At the bench's sizes: against cuBLASLt on the same codes (no CPU reference: 4096 x 576 x 7168).
TEST(CudaFp8GemmSm90, MatchesCublasLtAtPrefillSizes) {
  if (!Fp8GemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  for (const Shape& s : {Shape{4096, 576, 7168, "kv_a_M4096"}, Shape{4096, 32768, 512, "kv_b_M4096"}}) {
    Operands o(s);
    if (!GemmFp8Supported(s.M, s.N, s.K, s.K, s.K, s.N, DTypeOut::kBF16)) continue;
    Dev<__nv_bfloat16> dy(o.Mp * s.N);
    GemmFp8(o.G(dy.get()));
    auto cub = FromBf16(dy.Download());
    cub.resize(s.M * s.N);
    for (auto c : kConfigs)
      ExpectClose("fp8_gemm_sm90_vs_cublaslt", std::string(s.name) + "_config" + std::to_string(static_cast<int>(c)),
                  RunConfig(o, c), cub, 2e-3);
  }
}

TEST(CudaFp8GemmSm90, RejectsUnsupported) {
  Fp8GemmSm90Params p{};
  p.g.M = 16; p.g.N = 100; p.g.K = 100; p.g.ldx = p.g.ldw = 100; p.g.ldy = 100;
  const std::string why = Fp8GemmSm90Unsupported(p);
  EXPECT_FALSE(why.empty());
  if (Fp8GemmSm90Available()) EXPECT_NE(why.find("K % 128"), std::string::npos) << why;
  EXPECT_THROW(Fp8GemmSm90(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
