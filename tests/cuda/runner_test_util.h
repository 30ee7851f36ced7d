// Shared by the CUDA runner tests: where the fixtures and the carried DeepSeek-V3 config live,
// and the runner options of a DeepSeek-V3-config model with dummy weights.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_runner.h"

namespace ds::cuda::test {

// DS_TEST_DATA_DIR from the environment (the GPU machine's carried data), else the build's.
inline std::string DataDir() {
  const char* e = std::getenv("DS_TEST_DATA_DIR");
  return e ? e : DS_TEST_DATA_DIR;
}

// DeepSeek-V3's config (DataDir()/deepseek-v3), dummy weights from `seed`, the first `layers`
// layers, a KV pool of `kv_blocks` blocks; every other option at its default.
inline CudaRunnerOptions DummyV3Options(int layers, int kv_blocks, uint64_t seed) {
  CudaRunnerOptions o;
  o.model_dir = DataDir() + "/deepseek-v3";
  o.load_format = "dummy";
  o.num_layers = layers;
  o.num_kv_blocks = kv_blocks;
  o.seed = seed;
  return o;
}

}  // namespace ds::cuda::test
