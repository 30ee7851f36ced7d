// The OpenAI-compatible HTTP API over the Engine: /v1/chat/completions, /v1/completions
// (SSE streaming and not), /v1/models, /health, /metrics (Prometheus text), /tokenize,
// /detokenize (vLLM shapes). Request validation turns every bad field into an OpenAI error
// object {"error": {"message", "type", "param", "code"}} with the right HTTP status.
//
// Each OpenAI request fans out into n x prompts engine requests (one per choice); their
// outputs arrive on the engine thread and are formatted there into SSE chunks or collected
// for the final JSON body. A client disconnect aborts all of them (blocks freed next step).
#pragma once

#include <atomic>
#include <random>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/engine_group.h"
#include "server/http_server.h"
#include "server/text_tokenizer.h"

namespace ds {

struct OpenAIServerOptions {
  std::string served_model_name = "dsinfer";
  std::string api_key;           // empty: no auth
  std::string reasoning_parser;  // "" | "deepseek-r1"
  std::string tool_call_parser;  // "" | "deepseek_v3"
  int max_n = 128;
  int max_logprobs = 20;
  int max_stop_strings = 16;
};

class OpenAIServer {
 public:
  // `engine` and `tokenizer` must outlive the server.
  OpenAIServer(Engine* engine, const TextTokenizer* tokenizer, OpenAIServerOptions options);
  // Data-parallel serving: requests go to the group's ranks (runtime/engine_group.h); /metrics
  // reports the sums over ranks. `group` must outlive the server.
  OpenAIServer(EngineGroup* group, const TextTokenizer* tokenizer, OpenAIServerOptions options);
  void Handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> w);
  std::string RenderMetrics() const;
  // Requests whose HTTP response is still open.
  int num_open_requests() const { return open_requests_.load(); }

  // Sends {"error": {...}} with `status`.
  static void SendError(ResponseWriter& w, int status, const std::string& message,
                        const std::string& type, const nlohmann::json& param = nullptr,
                        const nlohmann::json& code = nullptr);

 private:
  void HandleGeneration(const HttpRequest& req, std::shared_ptr<ResponseWriter> w, bool chat);
  void HandleTokenize(const HttpRequest& req, std::shared_ptr<ResponseWriter> w);
  void HandleDetokenize(const HttpRequest& req, std::shared_ptr<ResponseWriter> w);
  void HandleModels(std::shared_ptr<ResponseWriter> w);

  std::unique_ptr<EngineGroup> own_group_;  // the one-engine group of the Engine* constructor
  EngineGroup* engine_;
  const TextTokenizer* tok_;
  OpenAIServerOptions opts_;
  std::atomic<uint64_t> next_id_{1};
  // Per-process salt of the response ids, so that ids do not repeat across server restarts.
  const uint64_t id_salt_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::atomic<int> open_requests_{0};
  int64_t start_time_;
};

// JSON text with invalid UTF-8 replaced (never throws on model output).
std::string DumpJson(const nlohmann::json& j);

}  // namespace ds
