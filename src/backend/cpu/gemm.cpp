// y[M, N] (+)= x[M, K] @ w[N, K]^T through OpenBLAS sgemm (torch Linear layout).
#include <cblas.h>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void Gemm(const GemmParams& p) {
  DS_CHECK(p.M >= 0 && p.N >= 0 && p.K >= 0) << "negative GEMM size";
  if (p.M == 0 || p.N == 0) return;
  DS_CHECK(p.ldx >= p.K && p.ldw >= p.K && p.ldy >= p.N) << "GEMM leading dimension too small";
  const float beta = p.accumulate ? 1.0f : 0.0f;
  if (p.K == 0) {
    if (!p.accumulate)
      for (int64_t i = 0; i < p.M; ++i)
        for (int64_t j = 0; j < p.N; ++j) p.y[i * p.ldy + j] = 0.0f;
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(p.M),
              static_cast<int>(p.N), static_cast<int>(p.K), 1.0f, p.x, static_cast<int>(p.ldx),
              p.w, static_cast<int>(p.ldw), beta, p.y, static_cast<int>(p.ldy));
}

}  // namespace ds::cpu
