// The CUDA backend's numerics and execution flags, shared by `generate`, `serve` and
// `bench one-batch` (one spelling, one help text): added to a CLI11 app, then copied into
// RunnerOptions (runtime/runner_factory.h), whose fields the CUDA runner factory passes on to
// CudaRunnerOptions (backend/cuda/cuda_runner.h, where each mode is documented).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "runtime/runner_factory.h"

namespace ds::tools {

struct CudaFlags {
  std::string fp8_gemm = "kernel";          // --fp8-gemm
  std::string decode_attn = "tensor-core";  // --decode-attention-backend
  bool precise_activations = false;         // --precise-activations
  bool disable_graphs = false;              // --disable-cuda-graph / --enforce-eager

  void AddTo(CLI::App& app) {
    app.add_option("--fp8-gemm", fp8_gemm,
                   "CUDA FP8 projections: kernel (bf16 activations, weights dequantised in the kernel) | cublas "
                   "(cuBLASLt block-scaled FP8, activations quantised to e4m3 per 1x128, DeepSeek's inference "
                   "numerics) | cublas-all")
        ->check(CLI::IsMember({"kernel", "cublas", "cublas-all"}))
        ->capture_default_str();
    app.add_option("--decode-attention-backend", decode_attn,
                   "CUDA: MLA decode attention: tensor-core (default; DeepSeek-V3 dims, others fall back) | cuda-core")
        ->check(CLI::IsMember({"tensor-core", "cuda-core"}))
        ->capture_default_str();
    app.add_flag("--precise-activations", precise_activations,
                 "CUDA: reference-precision numerics: bf16-weight GEMMs take fp32 activations as bf16 hi + lo "
                 "pairs (about 16 mantissa bits, 2x those GEMMs' cost); for accuracy checks against the CPU backend");
    app.add_flag("--disable-cuda-graph,--enforce-eager", disable_graphs,
                 "CUDA: run decode steps eagerly instead of replaying CUDA graphs");
  }
  void ApplyTo(RunnerOptions* ro) const {
    ro->fp8_gemm = fp8_gemm;
    ro->mla_decode_tensor_cores = decode_attn == "tensor-core";
    ro->precise_activations = precise_activations;
    ro->cuda_graphs = !disable_graphs;
  }
};

}  // namespace ds::tools
