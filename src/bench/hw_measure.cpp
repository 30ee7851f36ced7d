#include "bench/hw_measure.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace ds::bench {
namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

double MeasureCpuReadBandwidthGBps(int mbytes, int reps) {
  const size_t n = static_cast<size_t>(mbytes) * (1 << 20) / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    float total = 0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; ++i) total += buf[i];
    double s = Since(t0);
    sink = sink + total;
    if (s > 0) best = std::max(best, n * sizeof(float) / s / 1e9);
  }
  (void)sink;
  return best;
}

double MeasureCpuSgemmTflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double s = Since(t0);
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s / 1e12);
  }
  return best;
}

}  // namespace ds::bench
