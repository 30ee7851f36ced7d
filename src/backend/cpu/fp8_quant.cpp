// Per-token-group dynamic FP8 (e4m3) activation quantisation (DeepSeek-V3 act_quant).
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "common/dtype.h"

namespace ds::cpu {

void Fp8QuantizePerTokenGroup(const Fp8QuantParams& p) {
  const int64_t groups = (p.k + p.group - 1) / p.group;
#pragma omp parallel for if (p.n * p.k > 65536)
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * p.group, c1 = std::min(p.k, c0 + p.group);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(p.x[i * p.k + c]));
      const float scale = std::max(amax, 1e-10f) / 448.0f;
      p.scales[i * groups + g] = scale;
      for (int64_t c = c0; c < c1; ++c) p.q[i * p.k + c] = F32ToFp8E4M3(p.x[i * p.k + c] / scale);
    }
  }
}

}  // namespace ds::cpu
