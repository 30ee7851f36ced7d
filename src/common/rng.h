// Counter-based random numbers shared by every place that must draw the same values:
// SplitMix64 (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators"), and
// the sampling uniform every backend uses (cpu::Sample, the engine's sampler, the CUDA sampler
// in backend/cuda/sampling.cu, which mirrors it on the device):
//   u = (SplitMix64(seed ^ SplitMix64(step)) >> 11) * 2^-53, a uniform double in [0, 1).
#pragma once

#include <cstdint>

namespace ds {

constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The sampling draw for (seed, step): the same value on every backend.
constexpr double SampleUniform(uint64_t seed, uint64_t step) {
  return static_cast<double>(SplitMix64(seed ^ SplitMix64(step)) >> 11) * 0x1.0p-53;
}

}  // namespace ds
