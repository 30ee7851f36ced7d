// `dsinfer serve`: the OpenAI-compatible continuous-batching server (docs/serve.md).
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "model/config.h"
#include "runtime/dummy_checkpoint.h"
#include "runtime/engine.h"
#include "runtime/engine_group.h"
#include "scheduler/dp_policy.h"
#include "runtime/runner_factory.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/text_tokenizer.h"
#include "tools/cli_checks.h"
#include "tools/cuda_cli.h"
#include "tools/command.h"

namespace {

// SIGINT/SIGTERM: a handler (any thread may receive the signal: OpenBLAS/OpenMP threads exist
// before we could block signals) records it; the main thread polls. A second signal during
// the drain exits at once.
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_signal_count = 0;
void OnSignal(int sig) {
  g_signal = sig;
  g_signal_count = g_signal_count + 1;
  if (g_signal_count >= 2) std::_Exit(1);
}

// The embedded default model (no --model): DeepSeek-V3's architecture at toy size (2 layers,
// hidden 32, 4 routed experts + 1 shared, MLA with kv_lora_rank 16) and the real 129,280-token
// vocabulary, with seeded random weights. = tests/data/serve_tiny/config.json.
constexpr const char* kEmbeddedTinyConfig = R"({"architectures": ["DeepseekV3ForCausalLM"],
 "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 32, "intermediate_size": 64,
 "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
 "num_key_value_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
 "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4, "n_shared_experts": 1,
 "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "topk_method": "noaux_tc",
 "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
 "max_position_embeddings": 4096, "rope_theta": 10000, "rms_norm_eps": 1e-06,
 "hidden_act": "silu", "attention_bias": false, "tie_word_embeddings": false,
 "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16"})";

void RaiseFdLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int RunServe(int argc, char** argv) {
  CLI::App app{"dsinfer serve: OpenAI-compatible server with continuous batching", argv[0]};
  ds::RunnerOptions ro;
  std::string tokenizer_dir, served_name, host = "127.0.0.1", api_key, reasoning_parser,
              tool_parser, log_level = "info";
  int port = 8000, max_running = 64, max_batched = 2048, max_queued = 4096, max_model_len = 0;
  int io_threads = 2, dp_size = 1;
  std::string lb_method = "minimum_tokens";
  double shutdown_timeout = 30.0, stats_interval = 10.0;
  bool enable_prefix = true, disable_prefix = false, disable_overlap = false;
  size_t max_body = 8 << 20;
  app.add_option("--model", ro.model_dir,
                 "model directory (config.json + safetensors); default: an embedded tiny "
                 "DeepSeek-V3-architecture model with random weights");
  app.add_option("--tokenizer", tokenizer_dir,
                 "tokenizer directory (default: --model); 'byte' = byte-level test tokenizer");
  app.add_option("--served-model-name", served_name,
                 "model name in the API (default: --model; dsinfer-tiny without --model)");
  app.add_option("--load-format", ro.load_format,
                 "auto (safetensors) | dummy (seeded random weights) | fake (test runner)")
      ->check(CLI::IsMember({"auto", "dummy", "fake"}))->capture_default_str();
  app.add_option("--num-layers", ro.num_layers, "use only the first N layers (0 = all)")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  app.add_option("--device", ro.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--mem-fraction-static,--gpu-memory-utilization", ro.mem_fraction_static,
                 "GPU: fraction of device memory for weights + KV pool, in (0, 1]")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--num-kv-blocks", ro.num_kv_blocks, "KV pool size in 64-token blocks (0 = automatic)")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  app.add_option("--max-kv-tokens", ro.max_kv_tokens, "CPU: automatic KV pool size in tokens (0 = 65,536)")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  app.add_option("--seed", ro.seed, "seed of --load-format dummy weights");
  ds::tools::CudaFlags cuda_flags;
  cuda_flags.AddTo(app);
  app.add_option("--host", host, "listen address")->capture_default_str();
  app.add_option("--port", port, "listen port (0 = any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--api-key", api_key,
                 "require 'Authorization: Bearer KEY' on /v1 routes, /tokenize and /detokenize");
  app.add_option("--max-running-requests,--max-num-seqs", max_running, "sequences in the running batch (per DP rank)")
      ->check(ds::tools::kPositive)->capture_default_str();
  double conservativeness = 0.0;
  app.add_option("--schedule-conservativeness", conservativeness,
                 "admission reserve (SGLang's flag): admit a request only while the free KV blocks cover its whole "
                 "prompt and min(1, 0.3 x C) of its max_tokens, after the running requests' own reserve; fewer "
                 "preemptions when the cache fills. 0 = vLLM v1 admission (blocks for the next chunk only)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--dp-size,--data-parallel-size", dp_size,
                 "data-parallel ranks: engines with their own runner and KV cache (cuda: rank r on GPU r)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  // vLLM's / SGLang's tensor-parallel flag, accepted at its only supported value so that a user
  // who passes more gets told what to use instead (not a parse error about unexpected arguments).
  int tp_size = 1;
  app.add_option("--tensor-parallel-size,--tp-size,--tp", tp_size,
                 "tensor-parallel ranks of one engine: 1 only (serve scales over GPUs with --dp-size)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v == "1" ? std::string()
                            : "tensor parallelism " + v +
                                  " is not supported by serve: use --dp-size N to serve on N GPUs (one engine "
                                  "per GPU, attention data-parallel)";
          },
          "1"))
      ->capture_default_str();
  app.add_option("--load-balance-method", lb_method,
                 "DP request placement: minimum_tokens (least context tokens in flight = attention cost) | "
                 "shortest_queue | round_robin")
      ->check(CLI::IsMember({"minimum_tokens", "shortest_queue", "round_robin"}))->capture_default_str();
  app.add_option("--max-num-batched-tokens", max_batched, "token budget per engine step")
      ->check(ds::tools::kPositive)->capture_default_str();
  app.add_option("--max-queued-requests", max_queued, "waiting requests before 503")
      ->check(ds::tools::kPositive)->capture_default_str();
  app.add_option("--max-model-len,--context-length", max_model_len, "context length (0 = model's)")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  app.add_option("--shutdown-timeout", shutdown_timeout, "seconds to drain on SIGTERM")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  // SGLang spells them deepseek-r1 / deepseekv3, vLLM deepseek_r1 / deepseek_v3: both are accepted.
  app.add_option("--reasoning-parser", reasoning_parser,
                 "deepseek-r1 (= deepseek_r1): <think>...</think> -> reasoning_content (default: off)")
      ->check(CLI::IsMember({"deepseek-r1", "deepseek_r1"}));
  app.add_option("--tool-call-parser", tool_parser,
                 "deepseek_v3 (= deepseekv3): DeepSeek-V3 tool-call markup -> tool_calls (default: off)")
      ->check(CLI::IsMember({"deepseek_v3", "deepseekv3"}));
  app.add_flag("--enable-prefix-caching", enable_prefix, "reuse KV blocks of shared prompt prefixes (default)");
  app.add_flag("--disable-prefix-caching", disable_prefix, "turn prefix caching off");
  app.add_flag("--disable-overlap-schedule", disable_overlap,
               "run each step to its end before preparing the next (default: while the device runs a decode step, "
               "the next one of the same requests is already queued; SGLang's overlap scheduler)");
  app.add_option("--log-level", log_level, "debug | info | warning | error")->capture_default_str();
  app.add_option("--stats-interval", stats_interval, "seconds between engine stats lines (0 = off)")
      ->check(ds::tools::kNonNegative)->capture_default_str();
  app.add_option("--io-threads", io_threads, "HTTP I/O threads")->check(ds::tools::kPositive)->capture_default_str();
  app.add_option("--max-body-bytes", max_body, "request body limit (413 above)")
      ->check(ds::tools::kPositive)->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (ro.mem_fraction_static <= 0) {
    std::fprintf(stderr, "dsinfer serve: --mem-fraction-static must be in (0, 1], got %g\n", ro.mem_fraction_static);
    return 2;
  }
  if (reasoning_parser == "deepseek_r1") reasoning_parser = "deepseek-r1";
  if (tool_parser == "deepseekv3") tool_parser = "deepseek_v3";
  cuda_flags.ApplyTo(&ro);
  ds::LogLevel lvl;
  if (!ds::ParseLogLevel(log_level, &lvl)) {
    std::fprintf(stderr, "dsinfer serve: unknown --log-level '%s'\n", log_level.c_str());
    return 2;
  }
  ds::SetLogLevel(lvl);
  RaiseFdLimit();

  // --model may name the config.json itself (as `plan` and `inspect` accept): use its folder.
  if (!ro.model_dir.empty() && std::filesystem::is_regular_file(ro.model_dir))
    ro.model_dir = std::filesystem::path(ro.model_dir).parent_path().string();
  std::string embedded_dir;
  if (ro.model_dir.empty()) {
    auto dir = ds::MakeScratchDir("dsinfer_embedded_");
    if (!dir.ok()) {
      std::fprintf(stderr, "dsinfer serve: %s\n", dir.status().ToString().c_str());
      return 1;
    }
    embedded_dir = *dir;
    if (served_name.empty()) served_name = "dsinfer-tiny";
    if (tokenizer_dir.empty()) tokenizer_dir = "byte";
    nlohmann::json cj = nlohmann::json::parse(kEmbeddedTinyConfig);
    // With the byte-level tokenizer a 512-token vocabulary keeps the output visible text.
    if (tokenizer_dir == "byte") cj["vocab_size"] = 512;
    std::ofstream(embedded_dir + "/config.json") << cj.dump(1);
    ro.model_dir = embedded_dir;
    if (ro.load_format != "fake") ro.load_format = "dummy";  // no checkpoint: seeded random weights
  }
  // One runner per data-parallel rank (the CUDA runner of rank r on device r).
  std::vector<std::unique_ptr<ds::ModelRunner>> runners;
  for (int r = 0; r < dp_size; ++r) {
    ds::RunnerOptions rr = ro;
    rr.gpu_id = r;
    auto runner_or = ds::CreateModelRunner(rr);
    if (!runner_or.ok()) {
      if (!embedded_dir.empty()) std::filesystem::remove_all(embedded_dir);
      std::fprintf(stderr, "dsinfer serve: %s%s\n", dp_size > 1 ? ("DP rank " + std::to_string(r) + ": ").c_str() : "",
                   runner_or.status().ToString().c_str());
      return 1;
    }
    runners.push_back(std::move(runner_or).value());
  }
  if (!embedded_dir.empty()) std::filesystem::remove_all(embedded_dir);
  const ds::ModelConfig& cfg = runners[0]->config();

  std::unique_ptr<ds::TextTokenizer> tok;
  if (tokenizer_dir == "byte") {
    tok = ds::MakeByteTokenizer(cfg.vocab_size);
  } else {
    auto t = ds::LoadTextTokenizer(tokenizer_dir.empty() ? ro.model_dir : tokenizer_dir);
    if (!t.ok()) {
      std::fprintf(stderr, "dsinfer serve: tokenizer: %s%s\n", t.status().ToString().c_str(),
                   tokenizer_dir.empty() ? " (pass --tokenizer DIR, or --tokenizer byte for token-id prompts)" : "");
      return 1;
    }
    tok = std::move(t).value();
  }
  if (tok->vocab_size() > cfg.vocab_size) {
    std::fprintf(stderr, "dsinfer serve: the tokenizer has %d tokens but the model's vocab_size is %d\n",
                 tok->vocab_size(), cfg.vocab_size);
    return 1;
  }

  if (max_model_len > cfg.max_position_embeddings && cfg.max_position_embeddings > 0) {
    DS_LOG(WARNING) << "--max-model-len " << max_model_len << " is above the model's max_position_embeddings ("
                    << cfg.max_position_embeddings << "): outputs past that length are untested extrapolation";
  }
  ds::EngineOptions eo;
  eo.max_num_batched_tokens = max_batched;
  eo.max_running_requests = max_running;
  eo.decode_reserve_ratio = std::min(1.0, 0.3 * conservativeness);
  eo.max_queued_requests = max_queued;
  eo.max_model_len = max_model_len;
  eo.enable_prefix_caching = enable_prefix && !disable_prefix;
  eo.overlap_schedule = !disable_overlap;
  eo.stats_interval_s = stats_interval;
  eo.eos_token_ids = tok->eos_token_ids();
  for (int id : cfg.eos_token_ids)
    if (std::find(eo.eos_token_ids.begin(), eo.eos_token_ids.end(), id) == eo.eos_token_ids.end())
      eo.eos_token_ids.push_back(id);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::vector<std::unique_ptr<ds::Engine>> engines;
  std::vector<ds::Engine*> engine_ptrs;
  for (auto& r : runners) {
    engines.push_back(std::make_unique<ds::Engine>(r.get(), tok.get(), eo));
    engine_ptrs.push_back(engines.back().get());
  }
  std::unique_ptr<ds::DpPolicy> dp_policy;
  if (dp_size > 1) dp_policy = std::move(ds::MakeDpPolicy(lb_method)).value();  // checked by CLI11
  ds::EngineGroup group(engine_ptrs, std::move(dp_policy));
  auto start_all = [&] { for (auto& e : engines) e->Start(); };
  auto stop_all = [&] { for (auto& e : engines) e->Stop(); };
  ds::OpenAIServerOptions so;
  so.served_model_name = served_name.empty() ? ro.model_dir : served_name;
  so.api_key = api_key;
  so.reasoning_parser = reasoning_parser;
  so.tool_call_parser = tool_parser;
  ds::OpenAIServer api(&group, tok.get(), so);
  ds::HttpServerOptions ho;
  ho.host = host;
  ho.port = port;
  ho.io_threads = io_threads;
  ho.body_limit = max_body;
  ds::HttpServer http(ho, [&api](ds::HttpRequest&& r, std::shared_ptr<ds::ResponseWriter> w) {
    api.Handle(std::move(r), std::move(w));
  });
  start_all();
  ds::Status st = http.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "dsinfer serve: %s\n", st.ToString().c_str());
    stop_all();
    return 1;
  }
  DS_LOG(INFO) << "serving '" << so.served_model_name << "' (" << cfg.model_type << ", "
               << cfg.num_hidden_layers << " layers, vocab " << cfg.vocab_size << ") on http://"
               << host << ":" << http.port() << " | device " << ro.device << ", KV pool "
               << runners[0]->num_kv_blocks() << " blocks x " << ds::kBlockSize
               << " tokens" << (dp_size > 1 ? " per rank" : "") << ", max_model_len " << group.max_model_len()
               << ", prefix caching " << (eo.enable_prefix_caching ? "on" : "off") << ", overlap schedule "
               << (eo.overlap_schedule && runners[0]->CanOverlap() ? "on" : "off");
  if (dp_size > 1) {
    DS_LOG(INFO) << "data parallel: " << dp_size << " ranks, load balance " << group.policy_name();
  }
  std::fprintf(stdout, "dsinfer serve: listening on %s:%d\n", host.c_str(), http.port());
  std::fflush(stdout);

  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int sig = g_signal;
  DS_LOG(INFO) << "signal " << sig << ": stopping admission, draining " << group.num_in_flight()
               << " requests (timeout " << shutdown_timeout << " s)";
  group.StopAdmission();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout * 1000));
  while (std::chrono::steady_clock::now() < deadline &&
         (group.num_in_flight() > 0 || api.num_open_requests() > 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int left = group.num_in_flight();
  stop_all();  // aborts whatever is left; their responses end
  for (int i = 0; i < 50 && api.num_open_requests() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.Stop();
  DS_LOG(INFO) << "shutdown complete (" << left << " requests aborted at the timeout)";
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(serve, "OpenAI-compatible server with continuous batching", RunServe);
