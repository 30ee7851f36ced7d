// Naive-form MLA attention over decompressed K/V (causal; keys start at position 0).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void MlaPrefillAttention(const MlaPrefillParams& p) {
  DS_CHECK(p.q_pos0 + p.nq <= p.nk) << "queries reach past the keys: q_pos0=" << p.q_pos0
                                    << " nq=" << p.nq << " nk=" << p.nk;
  const int64_t H = p.heads;
  // Parallel only when there is enough work to pay for the threads.
  const bool par = p.nq * H * (p.q_pos0 + p.nq) * (p.dqk + p.dv) > (1 << 18);
#pragma omp parallel if (par)
  {
    std::vector<float> s(p.nk);
    std::vector<double> acc(p.dv);
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int64_t i = 0; i < p.nq; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const float* q = p.q + (i * H + h) * p.dqk;
        const int64_t nkeys = p.q_pos0 + i + 1;
        float mx = -INFINITY;
        for (int64_t j = 0; j < nkeys; ++j) {
          const float* k = p.k + (j * H + h) * p.dqk;
          float dot = 0.0f;
          for (int64_t c = 0; c < p.dqk; ++c) dot += q[c] * k[c];
          s[j] = dot * p.softmax_scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nkeys; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < nkeys; ++j) {
          const float* v = p.v + (j * H + h) * p.dv;
          const double w = s[j];
          for (int64_t c = 0; c < p.dv; ++c) acc[c] += w * v[c];
        }
        float* out = p.out + (i * H + h) * p.dv;
        for (int64_t c = 0; c < p.dv; ++c) out[c] = static_cast<float>(acc[c] / sum);
      }
    }
  }
}

}  // namespace ds::cpu
