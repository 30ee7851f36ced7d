// RMSNorm with optional fused residual add (transformers DeepseekV3RMSNorm, fp32).
#include <cmath>

#include "backend/cpu/ops.h"

namespace ds::cpu {

void RmsNorm(const RmsNormParams& p) {
#pragma omp parallel for if (p.n * p.d > 32768)
  for (int64_t i = 0; i < p.n; ++i) {
    const float* x = p.x + i * p.ldx;
    float* out = p.out + i * p.ldout;
    const float* src = x;
    if (p.residual != nullptr) {
      float* r = p.residual + i * p.ldres;
      for (int64_t j = 0; j < p.d; ++j) r[j] += x[j];
      src = r;
    }
    double ss = 0.0;
    for (int64_t j = 0; j < p.d; ++j) ss += static_cast<double>(src[j]) * src[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(p.d)) + p.eps);
    for (int64_t j = 0; j < p.d; ++j) out[j] = src[j] * inv * p.weight[j];
  }
}

}  // namespace ds::cpu
