// RMSNorm (+residual) vs ds::cpu::RmsNorm.
#include "backend/cpu/ops.h"
#include "backend/cuda/rmsnorm.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(int64_t n, int64_t d, int64_t ld, bool residual, DTypeOut out_type, const char* name) {
  auto x = RandomNormal(n * ld, 3.f);
  auto res = RandomNormal(n * ld);
  auto w = RandomF(d, 0.5f, 1.5f);
  std::vector<float> res_ref = res, out_ref(n * d);
  cpu::RmsNorm({x.data(), ld, residual ? res_ref.data() : nullptr, ld, w.data(), out_ref.data(), d, n, d, 1e-6f});
  Dev<float> dx(x), dres(res), dw(w);
  std::vector<float> got;
  if (out_type == DTypeOut::kF32) {
    Dev<float> dout(n * d);
    RmsNorm({dx.get(), ld, residual ? dres.get() : nullptr, ld, dw.get(), dout.get(), d, DTypeOut::kF32, n, d, 1e-6f, nullptr});
    got = dout.Download();
  } else {
    Dev<__nv_bfloat16> dout(n * d);
    RmsNorm({dx.get(), ld, residual ? dres.get() : nullptr, ld, dw.get(), dout.get(), d, DTypeOut::kBF16, n, d, 1e-6f, nullptr});
    got = FromBf16(dout.Download());
  }
  ExpectClose("rmsnorm", std::string(name) + (out_type == DTypeOut::kF32 ? "_f32" : "_bf16"), got, out_ref,
              out_type == DTypeOut::kF32 ? 1e-6 : 4e-3);
  if (residual) {
    auto r = dres.Download();
    std::vector<float> rg, rr;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) { rg.push_back(r[i * ld + j]); rr.push_back(res_ref[i * ld + j]); }
    ExpectClose("rmsnorm_residual", name, rg, rr, 0.0);
  }
}

TEST(CudaRmsNorm, MatchesCpu) {
  for (auto ot : {DTypeOut::kF32, DTypeOut::kBF16}) {
    RunCase(64, 7168, 7168, true, ot, "hidden_M64_residual");
    RunCase(1, 7168, 7168, false, ot, "hidden_M1");
    RunCase(33, 512, 576, false, ot, "kv_a_norm_ld576");
    RunCase(7, 1536, 1536, false, ot, "q_a_norm");
    RunCase(3, 33, 40, true, ot, "odd_d33");
  }
}

}  // namespace
}  // namespace ds::cuda::test
