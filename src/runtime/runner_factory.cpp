#include "runtime/runner_factory.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/param_count.h"
#include "runtime/cpu_runner.h"
#include "runtime/dummy_checkpoint.h"
#include "runtime/fake_model_runner.h"

namespace ds {

namespace {
RunnerCreateFn& CudaFactory() {
  static RunnerCreateFn fn = nullptr;
  return fn;
}
}  // namespace

void RegisterCudaRunnerFactory(RunnerCreateFn fn) { CudaFactory() = fn; }

StatusOr<std::unique_ptr<ModelRunner>> CreateModelRunner(const RunnerOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    return InvalidArgument("--device must be cpu or cuda, got '" + o.device + "'");
  if (o.device == "cuda" && o.load_format != "fake") {
    // dsinfer_core is compiled without CUDA; a CUDA build registers its runner at start-up
    // (src/tools/cuda_runner_hook.cpp), so the check is at run time.
    if (!CudaFactory())
      return Unimplemented("--device cuda: this dsinfer was built without CUDA (configure with "
                           "-DDS_CUDA=ON on a machine with the CUDA toolkit)");
    return CudaFactory()(o);
  }
  DS_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(o.model_dir));
  if (o.num_layers > 0 && o.num_layers < cfg.num_hidden_layers) cfg.num_hidden_layers = o.num_layers;
  int blocks = o.num_kv_blocks;
  if (blocks <= 0) {
    // CPU: the pool holds max_kv_tokens tokens (default 65,536), capped at 1 GiB of fp32
    // latent cache (kv_lora_rank + qk_rope_head_dim floats per token per layer).
    int64_t tokens = o.max_kv_tokens > 0 ? o.max_kv_tokens : 65536;
    const int64_t per_token = std::max<int64_t>(1, static_cast<int64_t>(cfg.latent_dim()) *
                                                       cfg.num_hidden_layers * 4);
    if (o.max_kv_tokens <= 0) tokens = std::min<int64_t>(tokens, (int64_t{1} << 30) / per_token);
    blocks = static_cast<int>(std::max<int64_t>(1, (tokens + kBlockSize - 1) / kBlockSize));
  }
  if (o.load_format == "fake") {
    // Optional DIR/fake_runner.json: {"echo_begin": id, "echo_end": id, "echo_eos": id,
    // "step_delay_us": n}.
    FakeEcho echo;
    const std::filesystem::path fj = std::filesystem::path(o.model_dir) / "fake_runner.json";
    if (std::filesystem::exists(fj)) {
      try {
        std::ifstream in(fj);
        nlohmann::json j = nlohmann::json::parse(in);
        echo.begin = j.value("echo_begin", -1);
        echo.end = j.value("echo_end", -1);
        echo.eos = j.value("echo_eos", -1);
        echo.step_delay_us = j.value("step_delay_us", 0);
      } catch (const std::exception& e) {
        return InvalidArgument(fj.string() + ": " + e.what());
      }
    }
    return std::unique_ptr<ModelRunner>(std::make_unique<FakeModelRunner>(cfg, blocks, echo));
  }
  if (o.load_format != "auto" && o.load_format != "dummy")
    return InvalidArgument("--load-format must be auto, dummy or fake, got '" + o.load_format + "'");
  // The CPU runner holds every weight in fp32 (and --load-format dummy first writes them as a
  // bf16 checkpoint under $TMPDIR): refuse a model that cannot fit in this machine's memory
  // (DeepSeek-V3: 2.7 TB) before writing or loading anything.
  const int64_t fp32_bytes = ComputeWeightStats(cfg).total_params * 4;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0 && fp32_bytes > static_cast<int64_t>(pages) * page_size) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char msg[320];
    std::snprintf(msg, sizeof msg,
                  "--device cpu: the CPU runner keeps weights in fp32: %.1f GiB for %d layers, more than this "
                  "machine's %.1f GiB of memory (use --num-layers N, or --device cuda)",
                  fp32_bytes / gib, cfg.num_hidden_layers, static_cast<double>(pages) * page_size / gib);
    return ResourceExhausted(msg);
  }
  CpuRunnerOptions co;
  co.num_kv_blocks = blocks;
  if (o.load_format == "auto" && o.num_layers <= 0) {
    DS_ASSIGN_OR_RETURN(auto cpu, CpuModelRunner::Create(o.model_dir, co));
    cpu->set_mla_mode(o.mla_mode);
    return std::unique_ptr<ModelRunner>(std::move(cpu));
  }
  // dummy weights, or a layer-truncated view of a checkpoint: a scratch directory with the
  // edited config.json and (dummy) the generated weights or (auto) links to the checkpoint.
  namespace fs = std::filesystem;
  const fs::path src = fs::is_directory(o.model_dir) ? fs::path(o.model_dir) : fs::path(o.model_dir).parent_path();
  nlohmann::json cj;
  try {
    std::ifstream in(src / "config.json");
    cj = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return InvalidArgument((src / "config.json").string() + ": " + e.what());
  }
  if (o.num_layers > 0 && o.num_layers < cj.value("num_hidden_layers", 0)) cj["num_hidden_layers"] = o.num_layers;
  DS_ASSIGN_OR_RETURN(std::string scratch, MakeScratchDir("dsinfer_model_"));
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::error_code ec; fs::remove_all(dir, ec); }
  } cleanup{scratch};
  if (o.load_format == "dummy") {
    DS_RETURN_IF_ERROR(WriteDummyCheckpoint(cj, o.seed, scratch));
  } else {
    std::ofstream(fs::path(scratch) / "config.json") << cj.dump(1);
    for (const auto& e : fs::directory_iterator(src)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 12 && (name.ends_with(".safetensors") || name.ends_with(".index.json"))) {
        std::error_code ec;
        fs::create_symlink(fs::absolute(e.path()), fs::path(scratch) / name, ec);
        if (ec) return Internal("cannot link " + e.path().string() + ": " + ec.message());
      }
    }
  }
  DS_ASSIGN_OR_RETURN(auto cpu, CpuModelRunner::Create(scratch, co));
  cpu->set_mla_mode(o.mla_mode);
  return std::unique_ptr<ModelRunner>(std::move(cpu));
}

}  // namespace ds
