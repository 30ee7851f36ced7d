// CreateModelRunner: the one place that turns serve/generate options into a ModelRunner.
// Backends plug in here (the CUDA runner behind DS_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/mla.h"
#include "runtime/model_runner.h"

namespace ds {

struct RunnerOptions {
  std::string model_dir;            // directory with config.json (+ *.safetensors)
  std::string device = "cpu";       // "cpu" | "cuda"
  std::string load_format = "auto"; // "auto" (safetensors) | "dummy" (seeded random) | "fake"
  int num_layers = 0;               // > 0: truncate the model to its first N layers
  int num_kv_blocks = 0;            // 0: automatic (CPU: from max_kv_tokens; GPU: mem fraction)
  int64_t max_kv_tokens = 0;        // CPU automatic pool size in tokens (0: 65536)
  double mem_fraction_static = 0.9; // GPU: fraction of device memory for weights + KV pool
  uint64_t seed = 0;                // dummy weights
  bool cuda_graphs = true;          // GPU: decode steps through CUDA graphs (--disable-cuda-graph)
  bool profile = false;             // GPU: per-phase device time (ModelRunner::TakeProfile)
  int gpu_id = 0;                   // GPU: CUDA device ordinal (data-parallel rank r uses GPU r)
  // GPU: absorbed-MLA decode attention on tensor cores (V3 dims) or the CUDA-core kernel
  // (--decode-attention-backend tensor-core | cuda-core).
  bool mla_decode_tensor_cores = true;
  // GPU: FP8 projections "kernel" | "cublas" | "cublas-all" (--fp8-gemm) and the
  // reference-precision mode (--precise-activations); see CudaRunnerOptions.
  std::string fp8_gemm = "kernel";
  bool precise_activations = false;
  // MLA form (CPU: any; GPU: auto only) and, GPU, the tokens per model pass (longer prefills
  // are chunked).
  MlaMode mla_mode = MlaMode::kAuto;
  int max_tokens_per_pass = 8192;
};

// Errors: NOT_FOUND (no config), INVALID_ARGUMENT (bad option), UNIMPLEMENTED (e.g. --device
// cuda in a build without CUDA).
StatusOr<std::unique_ptr<ModelRunner>> CreateModelRunner(const RunnerOptions& options);

// The CUDA backend lives in a library linked after dsinfer_core, so it plugs in here: a CUDA
// build registers its constructor at start-up (src/tools/cuda_runner_hook.cpp) and
// CreateModelRunner calls it for --device cuda.
using RunnerCreateFn = StatusOr<std::unique_ptr<ModelRunner>> (*)(const RunnerOptions&);
void RegisterCudaRunnerFactory(RunnerCreateFn fn);

}  // namespace ds
