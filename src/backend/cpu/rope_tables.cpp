// cos/sin tables for default and YaRN RoPE, mirroring transformers'
// _compute_default_rope_parameters / _compute_yarn_parameters (modeling_rope_utils.py) and the
// rotary forward, including their fp32 arithmetic (inv_freq, position * inv_freq in float32).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {
namespace {

double GetMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double FindCorrectionDim(double num_rotations, double dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

}  // namespace

void ComputeRopeTables(const RopeTableParams& p) {
  DS_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0) << "rope_dim must be even and > 0";
  const int64_t half = p.rope_dim / 2;
  std::vector<float> inv_freq(half);
  double attention_factor = 1.0;
  for (int64_t i = 0; i < half; ++i) {
    // torch: base ** (arange(0, dim, 2).float() / dim), in float32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(p.rope_dim);
    const float pos_freq = std::pow(static_cast<float>(p.theta), expo);
    inv_freq[i] = 1.0f / pos_freq;
  }
  if (p.yarn) {
    const double factor = p.factor;
    if (p.mscale != 0.0 && p.mscale_all_dim != 0.0)
      attention_factor = GetMscale(factor, p.mscale) / GetMscale(factor, p.mscale_all_dim);
    else
      attention_factor = GetMscale(factor, 1.0);
    const double beta_fast = p.beta_fast != 0.0 ? p.beta_fast : 32.0;
    const double beta_slow = p.beta_slow != 0.0 ? p.beta_slow : 1.0;
    const double dim = static_cast<double>(p.rope_dim);
    double low = FindCorrectionDim(beta_fast, dim, p.theta, static_cast<double>(p.original_max_pos));
    double high = FindCorrectionDim(beta_slow, dim, p.theta, static_cast<double>(p.original_max_pos));
    if (p.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const float pos_freq = 1.0f / inv_freq[i];
      const float extrap = 1.0f / pos_freq;
      const float interp = 1.0f / (static_cast<float>(factor) * pos_freq);
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
      ramp = std::clamp(ramp, 0.0f, 1.0f);
      const float extrap_factor = 1.0f - ramp;
      inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
  }
  const float af = static_cast<float>(attention_factor);
#pragma omp parallel for if (p.max_pos * half > 65536)
  for (int64_t pos = 0; pos < p.max_pos; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];  // fp32 as torch
      p.cos[pos * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * af;
      p.sin[pos * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * af;
    }
  }
}

}  // namespace ds::cpu
