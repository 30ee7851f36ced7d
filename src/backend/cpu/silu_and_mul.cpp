// SwiGLU activation: out = silu(gate) * up, gate_up = [gate | up] per row.
#include <cmath>

#include "backend/cpu/ops.h"

namespace ds::cpu {

void SiluAndMul(const SiluAndMulParams& p) {
#pragma omp parallel for if (p.n * p.inter > 65536)
  for (int64_t i = 0; i < p.n; ++i) {
    const float* g = p.gate_up + i * p.ld_in;
    const float* u = g + p.inter;
    float* o = p.out + i * p.ld_out;
    for (int64_t j = 0; j < p.inter; ++j) {
      const float x = g[j];
      o[j] = x / (1.0f + std::exp(-x)) * u[j];
    }
  }
}

}  // namespace ds::cpu
