// In-place rotary position embedding of the rope channels of every head.
// interleave: pairs (x[2i], x[2i+1]) -> out[i], out[i + d/2] (transformers
// apply_rotary_pos_emb_interleave); otherwise rotate_half pairs (x[i], x[i + d/2]).
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void ApplyRope(const RopeParams& p) {
  DS_CHECK(p.rope_dim % 2 == 0) << "rope_dim must be even";
  const int64_t half = p.rope_dim / 2;
  for (int64_t t = 0; t < p.n; ++t)
    DS_CHECK(p.positions[t] >= 0 && p.positions[t] < p.max_pos)
        << "position " << p.positions[t] << " outside the rope table (" << p.max_pos << ")";
#pragma omp parallel for if (p.n * p.heads > 256)
  for (int64_t t = 0; t < p.n; ++t) {
    const float* c = p.cos + static_cast<int64_t>(p.positions[t]) * half;
    const float* s = p.sin + static_cast<int64_t>(p.positions[t]) * half;
    std::vector<float> tmp(p.rope_dim);
    for (int64_t h = 0; h < p.heads; ++h) {
      float* x = p.x + t * p.token_stride + h * p.head_stride + p.offset;
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = p.interleave ? x[2 * i] : x[i];
        const float x1 = p.interleave ? x[2 * i + 1] : x[i + half];
        tmp[i] = x0 * c[i] - x1 * s[i];
        tmp[i + half] = x1 * c[i] + x0 * s[i];
      }
      for (int64_t i = 0; i < p.rope_dim; ++i) x[i] = tmp[i];
    }
  }
}

}  // namespace ds::cpu
