// Fp8GemmSm90 (CUTLASS FP8 block-scaled GEMM at prefill sizes, GemmFp8's orientation) vs the CPU
// GEMM on dequantised operands for every configuration, and vs cuBLASLt's GemmFp8 on the same
// codes at DeepSeek-V3's kv_a / kv_b shapes (informational: both round to bf16).
#include "backend/cuda/fp8_gemm_sm90.h"

#include <memory>
#include "fp8_gemm_test_util.h"

namespace ds::cuda::test {
namespace {

using fp8::Shape;

const Fp8GemmSm90Config kConfigs[] = {Fp8GemmSm90Config::kCoop128StreamK, Fp8GemmSm90Config::kCoop128Cluster2,
                                      Fp8GemmSm90Config::kPingpong64, Fp8GemmSm90Config::kCoop128DataParallel};

using fp8::Operands;

std::vector<float> RunConfig(const Operands& o, Fp8GemmSm90Config c) {
  Dev<__nv_bfloat16> dy(o.Mp * o.ldn);
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
  return fp8::RowsOf(o, FromBf16(dy.Download()));
}

TEST(CudaFp8GemmSm90, MatchesCpuEveryConfig) {
  if (!Fp8GemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const Shape shapes[] = {{200, 576, 7168, "kv_a_M200"}, {256, 2048, 512, "kv_b_like_M256"},
                          {130, 272, 1024, "odd_M130_N272"}, {64, 1536, 2048, "M64"},
                          {100, 256, 1024, "padded_ld_M100", 32}};
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
  if (Fp8GemmSm90Available()) {
    EXPECT_NE(why.find("K % 128"), std::string::npos) << why;
  }
  EXPECT_THROW(Fp8GemmSm90(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
