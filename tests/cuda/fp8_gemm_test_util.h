// Shared operands of the FP8 block-scaled GEMM op tests (test_fp8_gemm_skinny_sm90.cpp,
// test_fp8_gemm_sm90.cpp): x quantised on the GPU (group-major scales over Mp rows; padding
// columns and rows >= M hold NaN codes), w random e4m3 codes with 128x128 block scales (and
// their MN-major transposes, 128- and 64-row), and the fp32 reference on the dequantised
// operands.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/gemm.h"
#include "test_util.h"

namespace ds::cuda::test::fp8 {

// pad: extra elements in every leading dimension (ldx = ldw = K + pad, ldy = N + pad).
struct Shape { int64_t M, N, K; const char* name; int64_t pad = 0; };

// Device operands for one shape: x quantised on the GPU (group-major scales over Mp rows), w
// random e4m3 codes with 128x128 block scales, transposed once for the kernel.
struct Operands {
  Shape s;
  int64_t Mp, kb, nb, sld;
  std::vector<uint8_t> wq;
  std::vector<float> ws_cpu;  // [nb, kb]
  std::unique_ptr<Dev<uint8_t>> dxq, dwq;
  std::unique_ptr<Dev<float>> dxs, dws, dws_mn, dws_mn64;
  int64_t ldk, ldn;  // the leading dimensions: K + pad, N + pad
  explicit Operands(const Shape& sh) : s(sh) {
    Mp = Fp8PaddedM(s.M); kb = (s.K + 127) / 128; nb = (s.N + 127) / 128; sld = Fp8WeightScaleLd(s.K);
    ldk = s.K + s.pad; ldn = s.N + s.pad;
    auto x = RandomNormal(s.M * s.K);
    wq.resize(s.N * s.K);
    std::uniform_int_distribution<int> code(0, 255);
    for (auto& c : wq) { int v = code(Rng()); if ((v & 0x7f) == 0x7f) v = 0x3f; c = static_cast<uint8_t>(v); }
    std::vector<float> ws(nb * sld, 0.f);
    ws_cpu.resize(nb * kb);
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j < kb; ++j) ws[i * sld + j] = ws_cpu[i * kb + j] = std::ldexp(1.0f, -8) * (1 + (i + 2 * j) % 7);
    Dev<float> dx(x);
    dxq = std::make_unique<Dev<uint8_t>>(Mp * ldk);
    std::vector<uint8_t> wq_ld(s.N * ldk, 0x7f);  // padding: NaN codes, never to be read
    for (int64_t n = 0; n < s.N; ++n) std::copy(wq.begin() + n * s.K, wq.begin() + (n + 1) * s.K, wq_ld.begin() + n * ldk);
    dwq = std::make_unique<Dev<uint8_t>>(wq_ld);
    dxs = std::make_unique<Dev<float>>(kb * Mp);
    dws = std::make_unique<Dev<float>>(ws);
    dws_mn = std::make_unique<Dev<float>>(kb * nb);
    dws_mn64 = std::make_unique<Dev<float>>(kb * ((s.N + 63) / 64));
    // Padding columns and rows >= M: NaN codes (the quantiser writes rows < M, columns < K), so
    // a kernel that reads them, or mixes rows, shows up as non-finite outputs.
    DS_CUDA_CHECK(cudaMemset(dxq->get(), 0x7f, Mp * ldk));
    DS_CUDA_CHECK(cudaMemset(dxs->get(), 0, kb * Mp * sizeof(float)));
    Fp8QuantParams qp{dx.get(), false, s.K, s.M, s.K, 128, dxq->get(), ldk, dxs->get(), ScaleLayout::kGroupMajor, nullptr};
    qp.scale_ld = Mp;
    Fp8QuantizePerTokenGroup(qp);
    Fp8TransposeWeightScales(dws->get(), sld, s.N, s.K, dws_mn->get(), nullptr);
    Fp8TransposeWeightScales(dws->get(), sld, s.N, s.K, dws_mn64->get(), nullptr, 64);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  GemmFp8Params G(void* y) const {
    return {dxq->get(), ldk, dxs->get(), dwq->get(), ldk, dws->get(), sld, y, ldn, DTypeOut::kBF16, s.M, s.N, s.K, nullptr};
  }
  // fp32 reference on the dequantised operands (x from the GPU's own codes and scales).
  std::vector<float> Reference() const {
    auto xq = dxq->Download();
    auto xs = dxs->Download();
    std::vector<float> xd(s.M * s.K), wd(s.N * s.K), ref(s.M * s.N);
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t k = 0; k < s.K; ++k) xd[m * s.K + k] = Fp8E4M3ToF32(xq[m * ldk + k]) * xs[(k / 128) * Mp + m];
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k) wd[n * s.K + k] = Fp8E4M3ToF32(wq[n * s.K + k]) * ws_cpu[(n / 128) * kb + k / 128];
    cpu::Gemm({xd.data(), s.K, wd.data(), s.K, ref.data(), s.N, s.M, s.N, s.K, false});
    return ref;
  }
};

// y [Mp, ldn] bf16 -> its rows < M, columns < N.
inline std::vector<float> RowsOf(const Operands& o, const std::vector<float>& all) {
  std::vector<float> got(o.s.M * o.s.N);
  for (int64_t m = 0; m < o.s.M; ++m)
    std::copy(all.begin() + m * o.ldn, all.begin() + m * o.ldn + o.s.N, got.begin() + m * o.s.N);
  return got;
}

}  // namespace ds::cuda::test::fp8
