// Fp8SkinnyGemmSm90 (the swap-AB CUTLASS FP8 GEMM for M <= 64) vs the CPU GEMM on dequantised
// operands, at DeepSeek-V3 projection shapes and small ones, every decomposition of the stream-K
// scheduler; and vs cuBLASLt's GemmFp8 on the same inputs (informational: both round to bf16).
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/host_plans.h"

#include <memory>
#include "fp8_gemm_test_util.h"

namespace ds::cuda::test {
namespace {

using fp8::Operands;
using fp8::Shape;

std::vector<float> RunSkinny(const Operands& o, SkinnyDecomposition d, int splits, bool pingpong = false,
                             int scale_rows = 128, int ksplit = 1) {
  Dev<__nv_bfloat16> dy(o.Mp * o.ldn);
  Fp8SkinnyGemmParams p{};
  p.g = o.G(dy.get());
  p.w_scales_mn = scale_rows == 64 ? o.dws_mn64->get() : o.dws_mn->get();
  p.scale_rows = scale_rows;
  p.ksplit = ksplit;
  p.decomposition = d;
  p.splits = splits;
  p.pingpong = pingpong;
  const std::string why = Fp8SkinnyGemmSm90Unsupported(p);
  EXPECT_TRUE(why.empty()) << o.s.name << ": " << why;
  const size_t bytes = Fp8SkinnyGemmSm90WorkspaceBytes(o.s.M, o.s.N, o.s.K, d, splits, pingpong, scale_rows, ksplit);
  std::unique_ptr<Dev<uint8_t>> ws;
  if (bytes > 0) ws = std::make_unique<Dev<uint8_t>>(bytes);
  p.workspace = ws ? ws->get() : nullptr;
  p.workspace_bytes = bytes;
  Fp8SkinnyGemmSm90(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  return fp8::RowsOf(o, FromBf16(dy.Download()));
}

const char* DecompName(SkinnyDecomposition d) {
  switch (d) {
    case SkinnyDecomposition::kHeuristic: return "heuristic";
    case SkinnyDecomposition::kDataParallel: return "data_parallel";
    case SkinnyDecomposition::kSplitK: return "split_k";
    case SkinnyDecomposition::kStreamK: return "stream_k";
  }
  return "?";
}

TEST(CudaFp8SkinnyGemmSm90, MatchesCpuEveryDecomposition) {
  if (!Fp8SkinnyGemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const Shape shapes[] = {{1, 576, 7168, "kv_a_proj_M1"},    {3, 1536, 7168, "q_a_proj_M3"},
                          {16, 24576, 1536, "q_b_proj_M16"}, {33, 7168, 2048, "shared_down_M33"},
                          {64, 4096, 7168, "shared_gate_up_M64"}, {8, 272, 512, "odd_N272_M8"},
                          {24, 1536, 1024, "tile32_M24"},     {5, 528, 2048, "padded_ld_M5", 48}};
  for (const auto& s : shapes) {
    Operands o(s);
    const auto ref = o.Reference();
    for (auto d : {SkinnyDecomposition::kHeuristic, SkinnyDecomposition::kDataParallel, SkinnyDecomposition::kSplitK,
                   SkinnyDecomposition::kStreamK}) {
      const auto got = RunSkinny(o, d, d == SkinnyDecomposition::kSplitK ? 4 : 1);
      ExpectClose("fp8_gemm_skinny_sm90", std::string(s.name) + "_" + DecompName(d), got, ref, 5e-3);
    }
    const auto pp = RunSkinny(o, SkinnyDecomposition::kDataParallel, 1, /*pingpong=*/true);
    ExpectClose("fp8_gemm_skinny_sm90", std::string(s.name) + "_pingpong", pp, ref, 5e-3);
    const auto pp64 = RunSkinny(o, SkinnyDecomposition::kDataParallel, 1, /*pingpong=*/true, /*scale_rows=*/64);
    ExpectClose("fp8_gemm_skinny_sm90", std::string(s.name) + "_pingpong64", pp64, ref, 5e-3);
    for (int ks : {2, 4, 7, 8})
      if (s.K % (128 * ks) == 0) {
        const auto split = RunSkinny(o, SkinnyDecomposition::kDataParallel, 1, true, 64, ks);
        ExpectClose("fp8_gemm_skinny_sm90", std::string(s.name) + "_pingpong64_ksplit" + std::to_string(ks), split, ref,
                    5e-3);
      }
    // Against cuBLASLt on the same codes: both bf16 outputs of the same math.
    if (s.pad == 0 && GemmFp8Supported(s.M, s.N, s.K, s.K, s.K, s.N, DTypeOut::kBF16)) {
      Dev<__nv_bfloat16> dy(o.Mp * s.N);
      GemmFp8(o.G(dy.get()));
      auto cub = FromBf16(dy.Download());
      cub.resize(s.M * s.N);
      ErrStats e = Compare(RunSkinny(o, SkinnyDecomposition::kHeuristic, 1), cub);
      std::printf("[metric] op=fp8_gemm_skinny_vs_cublaslt case=%s rel_l2=%.3e max_abs=%.3e (informational)\n", s.name,
                  e.rel_l2, e.max_abs);
    }
  }
}

// fp32 output (the runner's W8A8 form, 64-row ping-pong tiles), unsplit and with the K split
// Fp8SkinnyAutoKsplit picks: 1e-3 against the CPU GEMM, as cuBLASLt's fp32 FP8 GEMM is held.
TEST(CudaFp8SkinnyGemmSm90, Fp32OutputMatchesCpu) {
  if (!Fp8SkinnyGemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  const Shape shapes[] = {{1, 576, 7168, "kv_a_proj_M1"}, {8, 1536, 7168, "q_a_proj_M8"}, {24, 7168, 2048, "down_M24"},
                          {5, 528, 2048, "padded_ld_M5", 48}, {40, 4096, 7168, "shared_gate_up_M40"},
                          {64, 1536, 7168, "q_a_proj_M64"}};
  for (const auto& s : shapes) {
    Operands o(s);
    const auto ref = o.Reference();
    for (int ks : {1, Fp8SkinnyAutoKsplit(s.M, s.N, s.K), 4}) {
      if (s.K % (128 * ks) != 0) continue;
      Dev<float> dy(o.Mp * o.ldn);
      Fp8SkinnyGemmParams p{};
      p.g = o.G(dy.get());
      p.g.y_type = DTypeOut::kF32;
      p.w_scales_mn = o.dws_mn64->get();
      p.scale_rows = 64; p.pingpong = true; p.decomposition = SkinnyDecomposition::kDataParallel; p.ksplit = ks;
      ASSERT_EQ(Fp8SkinnyGemmSm90Unsupported(p), "") << s.name;
      const size_t bytes = Fp8SkinnyGemmSm90WorkspaceBytes(s.M, s.N, s.K, p.decomposition, 1, true, 64, ks);
      Dev<uint8_t> ws(std::max<size_t>(bytes, 256));
      p.workspace = ws.get(); p.workspace_bytes = bytes;
      dy.Poison();
      Fp8SkinnyGemmSm90(p);
      DS_CUDA_CHECK(cudaDeviceSynchronize());
      ExpectClose("fp8_gemm_skinny_sm90_f32", std::string(s.name) + "_ksplit" + std::to_string(ks),
                  fp8::RowsOf(o, dy.Download()), ref, 1e-3);
    }
  }
  // fp32 output is the 64-row ping-pong form's only.
  Operands o({4, 256, 512, "f32_cooperative"});
  Dev<float> dy(o.Mp * o.ldn);
  Fp8SkinnyGemmParams p{};
  p.g = o.G(dy.get());
  p.g.y_type = DTypeOut::kF32;
  p.w_scales_mn = o.dws_mn->get();
  EXPECT_NE(Fp8SkinnyGemmSm90Unsupported(p).find("bf16 output only"), std::string::npos);
}

// The deterministic stream-K reduction: two runs give the same bits.
TEST(CudaFp8SkinnyGemmSm90, StreamKDeterministic) {
  if (!Fp8SkinnyGemmSm90Available()) GTEST_SKIP() << "needs an sm_90 device and a CUTLASS build";
  Operands o({4, 576, 7168, "kv_a_proj_M4"});
  const auto a = RunSkinny(o, SkinnyDecomposition::kStreamK, 1);
  const auto b = RunSkinny(o, SkinnyDecomposition::kStreamK, 1);
  ASSERT_EQ(a.size(), b.size());
  int64_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
  EXPECT_EQ(diff, 0);
}

TEST(CudaFp8SkinnyGemmSm90, RejectsUnsupported) {
  Fp8SkinnyGemmParams p{};
  p.g.M = 65; p.g.N = 100; p.g.K = 100; p.g.ldx = p.g.ldw = 100; p.g.ldy = 100;
  const std::string why = Fp8SkinnyGemmSm90Unsupported(p);
  EXPECT_FALSE(why.empty());
  if (Fp8SkinnyGemmSm90Available()) {
    EXPECT_NE(why.find("M 65"), std::string::npos) << why;
    EXPECT_NE(why.find("K % 128"), std::string::npos) << why;
    EXPECT_NE(why.find("N % 16"), std::string::npos) << why;
  }
  if (!Fp8SkinnyGemmSm90Available()) return;
  // Otherwise valid params (aligned dummy pointers, never launched): each rule by its message.
  alignas(16) static float dummy[64];
  Fp8SkinnyGemmParams q{};
  q.g.M = 1; q.g.N = 128; q.g.K = 1024; q.g.ldx = q.g.ldw = 1024; q.g.ldy = 128;
  q.g.xq = reinterpret_cast<const uint8_t*>(dummy); q.g.wq = reinterpret_cast<const uint8_t*>(dummy);
  q.g.x_scales = dummy; q.g.y = dummy; q.w_scales_mn = dummy;
  q.g.y_type = DTypeOut::kBF16;
  ASSERT_EQ(Fp8SkinnyGemmSm90Unsupported(q), "");
  const auto fails_with = [](Fp8SkinnyGemmParams r, const char* what) {
    const std::string why = Fp8SkinnyGemmSm90Unsupported(r);
    EXPECT_NE(why.find(what), std::string::npos) << "want '" << what << "', got '" << why << "'";
  };
  Fp8SkinnyGemmParams r = q;
  r.pingpong = true; r.decomposition = SkinnyDecomposition::kStreamK;
  fails_with(r, "ping-pong takes data-parallel");
  r = q; r.scale_rows = 64;
  fails_with(r, "ping-pong only");
  r = q; r.ksplit = 2;  // scale_rows 128
  fails_with(r, "ksplit 2");
  r = q; r.pingpong = true; r.scale_rows = 64; r.decomposition = SkinnyDecomposition::kDataParallel; r.ksplit = 3;
  fails_with(r, "ksplit 3");  // 8 K blocks do not split in 3
  r.ksplit = 0;
  fails_with(r, "ksplit 0");
  r = q; r.g.x_scales = dummy + 1;
  fails_with(r, "16-byte aligned");
  EXPECT_THROW(Fp8SkinnyGemmSm90(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
