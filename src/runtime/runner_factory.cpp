#include "runtime/runner_factory.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/fake_model_runner.h"

namespace ds {

StatusOr<std::unique_ptr<ModelRunner>> CreateModelRunner(const RunnerOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    return InvalidArgument("--device must be cpu or cuda, got '" + o.device + "'");
  if (o.device == "cuda") {
#ifndef DS_WITH_CUDA
    return Unimplemented("--device cuda: this dsinfer was built without CUDA (configure with "
                         "-DDS_CUDA=ON on a machine with the CUDA toolkit)");
#else
    return Unimplemented("--device cuda: the CUDA model runner is not available yet");
#endif
  }
  DS_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(o.model_dir));
  if (o.num_layers > 0 && o.num_layers < cfg.num_hidden_layers) cfg.num_hidden_layers = o.num_layers;
  int blocks = o.num_kv_blocks;
  if (blocks <= 0) {
    const int64_t tokens = o.max_kv_tokens > 0 ? o.max_kv_tokens : 65536;
    blocks = static_cast<int>((tokens + kBlockSize - 1) / kBlockSize);
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
  return Unimplemented("the CPU model runner is not available in this build yet");
}

}  // namespace ds
